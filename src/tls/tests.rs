//! Handshakes in memory against a rustls server, with the certificates of `testdata`
//! (written by `testdata/make.py`).

use std::io::{Read, Write};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};

use super::*;

const CA: &[u8] = include_bytes!("testdata/ca.pem");
const OTHER_CA: &[u8] = include_bytes!("testdata/other-ca.pem");
const SERVER: &[u8] = include_bytes!("testdata/server.pem");
const SERVER_KEY: &[u8] = include_bytes!("testdata/server.key");
const CLIENT: &[u8] = include_bytes!("testdata/client.pem");
const CLIENT_KEY: &[u8] = include_bytes!("testdata/client.key");
const CLIENT_ENCRYPTED_KEY: &[u8] = include_bytes!("testdata/client-encrypted.key");
const P521: &[u8] = include_bytes!("testdata/p521.pem");
const P521_KEY: &[u8] = include_bytes!("testdata/p521.key");

fn server(client_auth: bool) -> ServerConnection {
    let chain = CertificateDer::pem_slice_iter(SERVER)
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY).unwrap();
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if client_auth {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(CA).unwrap())
            .unwrap();
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).build();
        builder.with_client_cert_verifier(verifier.unwrap())
    } else {
        builder.with_no_client_auth()
    };
    let config = builder.with_single_cert(chain, key).unwrap();
    let mut server = ServerConnection::new(Arc::new(config)).unwrap();
    server.set_buffer_limit(None);
    server
}

fn server_output(server: &mut ServerConnection) -> Vec<u8> {
    let mut out = Vec::new();
    while server.wants_write() {
        server.write_tls(&mut out).unwrap();
    }
    out
}

/// Run the handshake; the client's error if it fails. The server's bytes are handed over
/// one byte at a time when `split` (reads cut anywhere).
fn handshake(
    client: &mut Session,
    server: &mut ServerConnection,
    split: bool,
) -> Result<(), Error> {
    let mut to_server = client.output();
    for _ in 0..10 {
        if !client.handshaking() && !server.is_handshaking() {
            return Ok(());
        }
        let mut data = &to_server[..];
        while !data.is_empty() {
            server.read_tls(&mut data).unwrap();
        }
        if server.process_new_packets().is_err() {
            // The server refused the client (its certificate): the alert says why.
            let alert = server_output(server);
            client.feed(&alert)?;
            return Err(Error::new(ErrorKind::Protocol, "refused by the server"));
        }
        let to_client = server_output(server);
        to_server = Vec::new();
        if split {
            for byte in to_client.chunks(1) {
                to_server.extend(client.feed(byte)?.out);
            }
        } else {
            to_server = client.feed(&to_client)?.out;
        }
    }
    panic!("the handshake did not end");
}

fn session(config: Arc<ClientConfig>, name: &str) -> Session {
    Session::new(config, name).unwrap()
}

/// Broken once: the session's buffer limit left at rustls's default (red: the 3 MB request
/// cannot be written whole).
#[test]
fn a_good_handshake_then_data_both_ways() {
    let config = client_config(Some(CA), None, None, true).unwrap();
    let mut client = session(config, "localhost");
    let mut server = server(false);
    handshake(&mut client, &mut server, false).unwrap();

    let request = b"GET /api HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut records = &client.encrypt(request).unwrap()[..];
    server.read_tls(&mut records).unwrap();
    server.process_new_packets().unwrap();
    let mut got = vec![0; request.len()];
    server.reader().read_exact(&mut got).unwrap();
    assert_eq!(got, request);

    // An answer longer than a record, read in pieces cut anywhere.
    let answer: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    server.writer().write_all(&answer).unwrap();
    let records = server_output(&mut server);
    let mut plain = Vec::new();
    for piece in records.chunks(1000) {
        let fed = client.feed(piece).unwrap();
        plain.extend(fed.plain);
        assert!(!fed.closed);
    }
    assert_eq!(plain, answer);

    // A large request and a large answer, each in one piece.
    let request: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let mut records = &client.encrypt(&request).unwrap()[..];
    let mut got = Vec::new();
    while !records.is_empty() {
        server.read_tls(&mut records).unwrap();
        server.process_new_packets().unwrap();
        let _ = server.reader().read_to_end(&mut got);
    }
    assert_eq!(got, request);
    server.writer().write_all(&answer).unwrap();
    let fed = client.feed(&server_output(&mut server)).unwrap();
    assert_eq!(fed.plain, answer);

    server.send_close_notify();
    let fed = client.feed(&server_output(&mut server)).unwrap();
    assert!(fed.closed);
    assert!(!client.close().is_empty());
}

#[test]
fn an_ip_address_is_a_server_name() {
    let config = client_config(Some(CA), None, None, true).unwrap();
    let mut client = session(config, "127.0.0.1");
    handshake(&mut client, &mut server(false), true).unwrap();
}

#[test]
fn a_server_of_another_ca_is_refused() {
    let config = client_config(Some(OTHER_CA), None, None, true).unwrap();
    let mut client = session(config, "localhost");
    let error = handshake(&mut client, &mut server(false), false).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Certificate);
    assert!(
        error
            .message
            .contains("unable to get local issuer certificate"),
        "{error}"
    );
}

#[test]
fn another_name_is_refused() {
    let config = client_config(Some(CA), None, None, true).unwrap();
    let mut client = session(config, "kubernetes.example");
    let error = handshake(&mut client, &mut server(false), false).unwrap_err();
    assert_eq!(error.kind, ErrorKind::Certificate);
    assert!(
        error.message.contains("not valid for 'kubernetes.example'"),
        "{error}"
    );
}

#[test]
fn without_verification_any_ca_and_name_are_taken() {
    let config = client_config(Some(OTHER_CA), None, None, false).unwrap();
    let mut client = session(config, "kubernetes.example");
    handshake(&mut client, &mut server(false), false).unwrap();
    let config = client_config(None, None, None, false).unwrap();
    let mut client = session(config, "10.0.0.1");
    handshake(&mut client, &mut server(false), false).unwrap();
}

#[test]
fn a_client_certificate_is_presented() {
    let config = client_config(Some(CA), Some(CLIENT), Some(CLIENT_KEY), true).unwrap();
    let mut client = session(config, "localhost");
    let mut server = server(true);
    handshake(&mut client, &mut server, false).unwrap();
    let presented = server.peer_certificates().unwrap();
    assert_eq!(
        presented[0],
        CertificateDer::from_pem_slice(CLIENT).unwrap()
    );
    // The key in the certificate's file, as `load_cert_chain` takes it without a key file.
    let both = [CLIENT, CLIENT_KEY].concat();
    client_config(Some(CA), Some(&both), None, true).unwrap();
}

#[test]
fn without_a_client_certificate_the_server_refuses() {
    let config = client_config(Some(CA), None, None, true).unwrap();
    let mut client = session(config, "localhost");
    assert!(handshake(&mut client, &mut server(true), false).is_err());
}

#[test]
fn what_cannot_be_loaded_is_unsupported() {
    let unsupported = |result: Result<Arc<ClientConfig>, Error>| {
        let error = result.map(|_| ()).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Unsupported, "{error}");
        error.message
    };
    let message = unsupported(client_config(None, None, None, true));
    assert!(message.contains("no CA file"));
    unsupported(client_config(Some(b"not a certificate"), None, None, true));
    let message = unsupported(client_config(
        Some(CA),
        Some(CLIENT),
        Some(CLIENT_ENCRYPTED_KEY),
        true,
    ));
    assert!(message.contains("key file"), "{message}");
    let message = unsupported(client_config(Some(CA), Some(P521), Some(P521_KEY), true));
    assert!(message.contains("client key"), "{message}");
    unsupported(client_config(
        Some(CA),
        Some(CLIENT_KEY),
        Some(CLIENT_KEY),
        true,
    ));
    let config = client_config(Some(CA), None, None, true).unwrap();
    assert_eq!(
        Session::new(config, "").err().unwrap().kind,
        ErrorKind::Unsupported
    );
}

#[test]
fn nothing_is_encrypted_before_the_handshake() {
    let config = client_config(Some(CA), None, None, true).unwrap();
    let mut client = session(config, "localhost");
    assert!(client.handshaking());
    assert_eq!(
        client.encrypt(b"GET").unwrap_err().kind,
        ErrorKind::Protocol
    );
}

#[test]
fn garbage_from_the_server_is_a_protocol_error() {
    let config = client_config(Some(CA), None, None, true).unwrap();
    let mut client = session(config, "localhost");
    client.output();
    let error = client
        .feed(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Protocol);
}
