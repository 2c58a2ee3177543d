//! What a write's answer says a cache must show, apart from how the answer is read (the
//! binding reads a Python mapping; the tests, plain values).
//!
//! The rules: a write that failed shows nothing; a create by ``generateName`` is named by
//! its answer; a write is recorded only if its answer names an object with a UID (a DELETE
//! also without one: its Status may not say) inside the cache's label selector; and the
//! version a cache must show is the answer's, except for a DELETE that removed the object
//! (its answer is the object as it was, or a Status): that one waits for the deletion. A
//! DELETE that finalizers hold up is answered with the object marked for deletion, whose
//! version a cache does show.

/// A write's answer as the rules read it, each field `""` when absent. Read only as far
/// as the rules need (a version only for a write that is recorded; whether the object is
/// still there only for such a DELETE).
pub trait Answer {
    type Error;
    /// ``metadata.name``.
    fn name(&self) -> Result<String, Self::Error>;
    /// ``metadata.uid``, or the UID a DELETE's Status names in its details.
    fn uid(&self) -> Result<String, Self::Error>;
    /// ``metadata.resourceVersion``.
    fn version(&self) -> Result<String, Self::Error>;
    /// The object is marked for deletion and finalizers keep it.
    fn still_there(&self) -> Result<bool, Self::Error>;
}

/// What a write's answer says a cache must show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The object's name (the write's, or the answer's for a create by ``generateName``).
    pub target: String,
    pub uid: String,
    /// The version a cache must show; None for a DELETE that removed the object (or
    /// nothing recorded).
    pub version: Option<String>,
    /// A cache will show it: the write succeeded, names an object, is inside the cache's
    /// label selector.
    pub recorded: bool,
}

/// The outcome of a write of `name` (`""`: a create by ``generateName``) answered with
/// `answer` (None: it failed); `deleted`: a DELETE; `in_selector`: the answer is inside
/// the cache's label selector.
pub fn outcome<A: Answer>(
    name: &str,
    answer: Option<&A>,
    deleted: bool,
    in_selector: bool,
) -> Result<Outcome, A::Error> {
    let Some(answer) = answer else {
        return Ok(Outcome {
            target: name.to_owned(),
            uid: String::new(),
            version: None,
            recorded: false,
        });
    };
    let target = if name.is_empty() {
        answer.name()?
    } else {
        name.to_owned()
    };
    let uid = answer.uid()?;
    let recorded = !target.is_empty() && (!uid.is_empty() || deleted) && in_selector;
    let mut version = None;
    if recorded && (!deleted || answer.still_there()?) {
        version = Some(answer.version()?).filter(|v| !v.is_empty());
    }
    Ok(Outcome {
        target,
        uid,
        version,
        recorded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::convert::Infallible;

    /// An answer of plain values, counting the fields read.
    #[derive(Default)]
    struct Plain {
        name: &'static str,
        uid: &'static str,
        version: &'static str,
        still_there: bool,
        reads: Cell<u32>,
    }

    impl Plain {
        fn read<T>(&self, value: T) -> Result<T, Infallible> {
            self.reads.set(self.reads.get() + 1);
            Ok(value)
        }
    }

    impl Answer for Plain {
        type Error = Infallible;
        fn name(&self) -> Result<String, Infallible> {
            self.read(self.name.to_owned())
        }
        fn uid(&self) -> Result<String, Infallible> {
            self.read(self.uid.to_owned())
        }
        fn version(&self) -> Result<String, Infallible> {
            self.read(self.version.to_owned())
        }
        fn still_there(&self) -> Result<bool, Infallible> {
            self.read(self.still_there)
        }
    }

    fn object(version: &'static str) -> Plain {
        Plain {
            name: "c",
            uid: "uid-c",
            version,
            ..Plain::default()
        }
    }

    fn of(name: &str, answer: Option<&Plain>, deleted: bool, in_selector: bool) -> Outcome {
        match outcome(name, answer, deleted, in_selector) {
            Ok(o) => o,
            Err(never) => match never {},
        }
    }

    #[test]
    fn a_write_waits_for_its_answers_version() {
        let answer = object("7");
        let o = of("c", Some(&answer), false, true);
        assert_eq!(
            o,
            Outcome {
                target: "c".into(),
                uid: "uid-c".into(),
                version: Some("7".into()),
                recorded: true
            }
        );
        assert_eq!(answer.reads.get(), 2); // its name is the write's; not whether it is there
    }

    #[test]
    fn a_failed_write_records_nothing() {
        let o = of("c", None, false, true);
        assert!(!o.recorded);
        assert_eq!((o.target.as_str(), o.version), ("c", None));
    }

    #[test]
    fn a_create_by_generate_name_is_named_by_its_answer() {
        let answer = Plain {
            name: "c-x1",
            ..object("7")
        };
        let o = of("", Some(&answer), false, true);
        assert_eq!(o.target, "c-x1");
        assert!(o.recorded);
    }

    #[test]
    fn an_answer_without_a_name_or_uid_or_outside_the_selector_records_nothing() {
        let nameless = Plain {
            name: "",
            ..object("7")
        };
        assert!(!of("", Some(&nameless), false, true).recorded);
        let uidless = Plain {
            uid: "",
            ..object("7")
        };
        assert!(!of("c", Some(&uidless), false, true).recorded);
        let outside = object("7");
        let o = of("c", Some(&outside), false, false);
        assert!(!o.recorded);
        assert_eq!(o.version, None);
        assert_eq!(outside.reads.get(), 1); // its uid: no version read for nothing
    }

    #[test]
    fn a_delete_waits_for_the_deletion_unless_finalizers_keep_the_object() {
        let gone = object("7");
        let o = of("c", Some(&gone), true, true);
        assert!(o.recorded);
        assert_eq!(o.version, None); // the object as it was: its version will not show
        let kept = Plain {
            still_there: true,
            ..object("8")
        };
        assert_eq!(of("c", Some(&kept), true, true).version, Some("8".into()));
        let status = Plain {
            name: "",
            uid: "",
            version: "",
            ..Plain::default()
        };
        let o = of("c", Some(&status), true, true);
        assert!(o.recorded); // a Status that names no UID: recorded, waits for the deletion
        assert_eq!((o.uid.as_str(), o.version), ("", None));
    }

    #[test]
    fn an_empty_version_is_none() {
        assert_eq!(of("c", Some(&object("")), false, true).version, None);
    }
}
