//! TLS for the lean transport (`fastctl.kube._http1`), with rustls on ring.
//!
//! The transport opens a plain TCP connection and gives this module what the socket reads
//! (ciphertext, `Session::feed`, which answers with the plaintext those bytes completed
//! and any TLS bytes to send back) and what it sends (`Session::encrypt`): one call each
//! way instead of the several Python-level calls per read and write of an SSL protocol
//! over a memory BIO.
//!
//! `client_config` builds the configuration from the PEM bytes of a kubeconfig's files: the
//! CA certificates (verified against, as Python's `ssl` does with a CA file and
//! `check_hostname`), the client certificate chain and key (client-certificate auth), or no
//! verification at all (`verify_ssl: false`). What this module cannot load (no CA file:
//! the system's roots; an encrypted key; a key type ring cannot sign with) is
//! `ErrorKind::Unsupported`: the transport then keeps Python's `ssl`.

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore,
};

#[cfg(test)]
mod tests;

/// What went wrong, as the transport reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A configuration this module does not take: the caller falls back to Python's `ssl`.
    Unsupported,
    /// The server's certificate was refused (unknown issuer, another name, expired...).
    Certificate,
    /// Any other failure of the TLS protocol (an alert, a malformed record).
    Protocol,
}

/// An error with a message that names the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    fn unsupported(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unsupported, message)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// ring's provider: X25519, P-256 and P-384 key exchange, no post-quantum hybrid (that
/// needs aws-lc-rs and cmake to build, which the wheels' cross builds avoid); a Go API
/// server that offers X25519MLKEM768 settles on X25519.
fn provider() -> Arc<CryptoProvider> {
    #[allow(deprecated)] // deprecated for the missing post-quantum groups, said above
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client configuration of one API server: `ca_pem` (required when `verify`), the
/// client certificate chain and its key (`key_pem`, else looked for in `chain_pem`, as
/// Python's ``load_cert_chain`` does).
pub fn client_config(
    ca_pem: Option<&[u8]>,
    chain_pem: Option<&[u8]>,
    key_pem: Option<&[u8]>,
    verify: bool,
) -> Result<Arc<ClientConfig>, Error> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::unsupported(format!("no TLS versions: {e}")))?;
    let builder = if verify {
        let Some(ca_pem) = ca_pem else {
            return Err(Error::unsupported(
                "no CA file: the system's roots are not read here",
            ));
        };
        let mut roots = RootCertStore::empty();
        let mut count = 0;
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            let cert = cert.map_err(|e| Error::unsupported(format!("the CA file: {e:?}")))?;
            roots
                .add(cert)
                .map_err(|e| Error::unsupported(format!("a CA certificate not taken: {e}")))?;
            count += 1;
        }
        if count == 0 {
            return Err(Error::unsupported("no certificate in the CA file"));
        }
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    };
    let config = match chain_pem {
        None => builder.with_no_client_auth(),
        Some(chain_pem) => {
            let chain = CertificateDer::pem_slice_iter(chain_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Error::unsupported(format!("the client certificate file: {e:?}")))?;
            if chain.is_empty() {
                return Err(Error::unsupported(
                    "no certificate in the client certificate file",
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key_pem.unwrap_or(chain_pem)).map_err(|e| {
                Error::unsupported(format!(
                    "no unencrypted PKCS#8, PKCS#1 or SEC1 key in the key file: {e:?}"
                ))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::unsupported(format!("the client key: {e}")))?
        }
    };
    Ok(Arc::new(config))
}

/// `verify_ssl: false`: any certificate, any name (the handshake's signatures are still
/// checked, so the session is at least with the holder of the certificate shown).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One client connection's TLS state.
pub struct Session {
    conn: ClientConnection,
    server_name: String,
}

/// What one read of the socket gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fed {
    /// The plaintext the read completed (often empty during the handshake).
    pub plain: Vec<u8>,
    /// TLS bytes to send back (handshake messages, a key update's answer).
    pub out: Vec<u8>,
    /// The server said it closes (close_notify).
    pub closed: bool,
}

impl Session {
    /// A session with `server_name` (a DNS name or an IP address) as the name the server's
    /// certificate must carry.
    pub fn new(config: Arc<ClientConfig>, server_name: &str) -> Result<Self, Error> {
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|_| Error::unsupported(format!("not a server name: {server_name:?}")))?;
        let mut conn = ClientConnection::new(config, name)
            .map_err(|e| Error::unsupported(format!("cannot start TLS: {e}")))?;
        // `encrypt` takes a request whole (a large object's create) and hands every record
        // back at once: no limit on what waits to be sent.
        conn.set_buffer_limit(None);
        Ok(Session {
            conn,
            server_name: server_name.to_owned(),
        })
    }

    /// Whether the handshake is still under way (`encrypt` waits for it).
    pub fn handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The TLS bytes waiting to be sent (the ClientHello, at first).
    pub fn output(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while self.conn.wants_write() {
            // Writing to a Vec cannot fail.
            if self.conn.write_tls(&mut out).unwrap_or(0) == 0 {
                break;
            }
        }
        out
    }

    /// Take one read of the socket: the plaintext it completed and what to send back.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<Fed, Error> {
        let mut fed = Fed::default();
        while !data.is_empty() {
            self.conn
                .read_tls(&mut data)
                .map_err(|e| Error::new(ErrorKind::Protocol, format!("TLS read: {e}")))?;
            let state = match self.conn.process_new_packets() {
                Ok(state) => state,
                Err(e) => return Err(self.error(e)),
            };
            let ready = state.plaintext_bytes_to_read();
            if ready > 0 {
                let start = fed.plain.len();
                fed.plain.resize(start + ready, 0);
                self.conn
                    .reader()
                    .read_exact(&mut fed.plain[start..])
                    .map_err(|e| Error::new(ErrorKind::Protocol, format!("TLS read: {e}")))?;
            }
            fed.closed |= state.peer_has_closed();
        }
        fed.out = self.output();
        Ok(fed)
    }

    /// `plain` encrypted: the TLS records to send.
    pub fn encrypt(&mut self, plain: &[u8]) -> Result<Vec<u8>, Error> {
        if self.conn.is_handshaking() {
            return Err(Error::new(
                ErrorKind::Protocol,
                "TLS handshake not complete",
            ));
        }
        self.conn
            .writer()
            .write_all(plain)
            .map_err(|e| Error::new(ErrorKind::Protocol, format!("TLS write: {e}")))?;
        Ok(self.output())
    }

    /// The close_notify alert to send before closing the connection.
    pub fn close(&mut self) -> Vec<u8> {
        self.conn.send_close_notify();
        self.output()
    }

    fn error(&self, error: rustls::Error) -> Error {
        let name = &self.server_name;
        match error {
            rustls::Error::InvalidCertificate(cert) => {
                let what = match cert {
                    CertificateError::UnknownIssuer => {
                        "unable to get local issuer certificate (the server's certificate is \
                         not signed by the configured CA)"
                            .to_owned()
                    }
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. } => {
                        format!("Hostname mismatch, certificate is not valid for '{name}'")
                    }
                    CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                        "certificate has expired".to_owned()
                    }
                    CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                        "certificate is not yet valid".to_owned()
                    }
                    other => format!("{other:?}"),
                };
                Error::new(
                    ErrorKind::Certificate,
                    format!("certificate verify failed: {what}"),
                )
            }
            other => Error::new(
                ErrorKind::Protocol,
                format!("TLS error with {name}: {other}"),
            ),
        }
    }
}
