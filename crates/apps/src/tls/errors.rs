//! Why a certificate chain does not validate, in a sentence (`tls_chain_error`). rustls names
//! its reasons as Rust values (`invalid peer certificate: UnknownIssuer`), and what it leaves
//! to webpki comes through as webpki's (`Other(OtherError(CaUsedAsEndEntity))`): each becomes
//! what a person checking a server would say.

use rustls::pki_types::UnixTime;
use rustls::{CertificateError, Error};

/// `error`, from validating a chain, as one sentence (no trailing period, lower case first:
/// it is a field's value).
pub(crate) fn chain_error(error: &Error) -> String {
    match error {
        Error::InvalidCertificate(why) => certificate_error(why),
        Error::NoCertificatesPresented => "the server sent no certificate".into(),
        Error::UnsupportedNameType => {
            "the name to check is of a kind certificates cannot name".into()
        }
        other => other.to_string(),
    }
}

fn certificate_error(error: &CertificateError) -> String {
    use CertificateError as E;
    match error {
        E::BadEncoding => "a certificate of the chain is not valid DER".into(),
        E::Expired => "the certificate has expired".into(),
        E::ExpiredContext { not_after, .. } => {
            format!("the certificate expired on {}", date(not_after))
        }
        E::NotValidYet => "the certificate is not valid yet".into(),
        E::NotValidYetContext { not_before, .. } => {
            format!("the certificate is valid only from {}", date(not_before))
        }
        E::Revoked => "the certificate has been revoked".into(),
        E::UnhandledCriticalExtension => {
            "a certificate of the chain has a critical extension the validator does not know".into()
        }
        E::UnknownIssuer => "the chain leads to no trusted root: its issuer is not among the roots (give the issuing CA's certificate with --root-cas)".into(),
        E::UnknownRevocationStatus => "the certificate's revocation status is unknown".into(),
        E::ExpiredRevocationList | E::ExpiredRevocationListContext { .. } => {
            "the revocation list has expired".into()
        }
        E::BadSignature => {
            "a certificate's signature does not verify with its issuer's key".into()
        }
        E::UnsupportedSignatureAlgorithmContext { .. }
        | E::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "a certificate is signed with an algorithm the validator does not support".into()
        }
        E::NotValidForName => "the certificate does not name the server".into(),
        E::NotValidForNameContext {
            expected,
            presented,
        } => match presented.as_slice() {
            [] => format!(
                "the certificate does not name {} (it names no server: no subjectAltName)",
                expected.to_str()
            ),
            names => format!(
                "the certificate does not name {}: it names {}",
                expected.to_str(),
                name_list(names)
            ),
        },
        E::InvalidPurpose | E::InvalidPurposeContext { .. } => {
            "the certificate is not for TLS servers (its extended key usage)".into()
        }
        E::InvalidOcspResponse => "the server's OCSP response is invalid".into(),
        E::ApplicationVerificationFailure => "the certificate was refused".into(),
        E::Other(other) => webpki_error(&other.to_string()),
        other => other.to_string(),
    }
}

/// At most this many of a certificate's names are listed; the rest are counted.
const NAMES_LISTED: usize = 4;

/// The names a certificate presents, as webpki writes them (`DnsName("a.test")`,
/// `IpAddress(198.18.0.1)`), bare and comma separated; past NAMES_LISTED, counted.
fn name_list(presented: &[String]) -> String {
    let bare = |name: &String| {
        let inner = ["DnsName(\"", "IpAddress("]
            .iter()
            .find_map(|wrap| name.strip_prefix(wrap))
            .map(|rest| rest.trim_end_matches(')').trim_end_matches('"'));
        inner.unwrap_or(name).to_string()
    };
    let mut list: Vec<String> = presented.iter().take(NAMES_LISTED).map(bare).collect();
    if presented.len() > NAMES_LISTED {
        list.push(format!("and {} more", presented.len() - NAMES_LISTED));
    }
    list.join(", ")
}

/// webpki's reasons that rustls passes on as they are, by their name.
fn webpki_error(text: &str) -> String {
    let name = text.split(['(', ' ', '{']).next().unwrap_or(text);
    let sentence = match name {
        "CaUsedAsEndEntity" => "the server's certificate is a CA's (basic constraints CA:TRUE), which cannot name a server: a self-signed CA certificate served as is; have a CA sign a server certificate",
        "EndEntityUsedAsCa" => "a certificate that signs another in the chain is not a CA's (basic constraints)",
        "CertDistrusted" => "the root store distrusts this certificate",
        "ExtensionValueInvalid" | "MalformedExtensions" => {
            "a certificate of the chain has a malformed extension"
        }
        "InvalidSerialNumber" => "a certificate of the chain has an invalid serial number",
        "MalformedDnsIdentifier" => "the certificate holds a malformed DNS name",
        "MalformedNameConstraint" => "an issuer's name constraints are malformed",
        "NameConstraintViolation" => "the certificate names what its issuer's name constraints forbid",
        "PathLenConstraintViolated" => "the chain is longer than one of its CAs allows (path length constraint)",
        "MaximumPathDepthExceeded" => "the chain is too long",
        "MaximumSignatureChecksExceeded" | "MaximumPathBuildCallsExceeded"
        | "MaximumNameConstraintComparisonsExceeded" => {
            "building the chain took more checks than the validator allows"
        }
        "SignatureAlgorithmMismatch" => {
            "a certificate's signature algorithm differs from the one its body declares"
        }
        "UnsupportedCertVersion" => "a certificate of the chain is not X.509 version 3",
        "UnsupportedCriticalExtension" => {
            "a certificate of the chain has a critical extension the validator does not know"
        }
        "UnsupportedNameType" => "the certificate names servers in a form the validator cannot check",
        "EmptyEkuExtension" => "the certificate's extended key usage lists nothing",
        _ => return format!("the chain does not validate: {text}"),
    };
    sentence.into()
}

/// A time as its day, `2026-11-28` (UTC).
fn date(time: &UnixTime) -> String {
    let seconds = i64::try_from(time.as_secs()).unwrap_or(i64::MAX);
    match x509_parser::time::ASN1Time::from_timestamp(seconds) {
        Ok(t) => {
            let t = t.to_datetime();
            format!("{:04}-{:02}-{:02}", t.year(), t.month() as u8, t.day())
        }
        Err(_) => format!("{seconds} s after 1970"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::OtherError;
    use std::sync::Arc;

    /// An error as webpki hands it to rustls when rustls has no name of its own for it.
    #[derive(Debug)]
    struct Webpki(&'static str);

    impl std::fmt::Display for Webpki {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Webpki {}

    fn other(name: &'static str) -> Error {
        Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Webpki(name)))))
    }

    #[test]
    fn reasons_read_as_sentences() {
        let ca = chain_error(&other("CaUsedAsEndEntity"));
        assert!(ca.starts_with("the server's certificate is a CA's"), "{ca}");
        let unknown = chain_error(&Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert!(
            unknown.contains("no trusted root") && unknown.contains("--root-cas"),
            "{unknown}"
        );
        let expired = chain_error(&Error::InvalidCertificate(
            CertificateError::ExpiredContext {
                time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000)),
                not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                    1_700_000_000,
                )),
            },
        ));
        assert_eq!(expired, "the certificate expired on 2023-11-14");
        let name = chain_error(&Error::InvalidCertificate(
            CertificateError::NotValidForNameContext {
                expected: "198.18.0.7".try_into().unwrap(),
                presented: vec![
                    "DnsName(\"sonde.test\")".into(),
                    "IpAddress(198.18.0.1)".into(),
                ],
            },
        ));
        assert_eq!(
            name,
            "the certificate does not name 198.18.0.7: it names sonde.test, 198.18.0.1"
        );
        let many: Vec<String> = (0..6).map(|i| format!("IpAddress(198.18.0.{i})")).collect();
        assert_eq!(
            name_list(&many),
            "198.18.0.0, 198.18.0.1, 198.18.0.2, 198.18.0.3, and 2 more"
        );
        // A reason of webpki's that has no sentence yet still says what it is.
        let new = chain_error(&other("SomethingNew"));
        assert_eq!(new, "the chain does not validate: SomethingNew");
        for e in [&ca, &unknown, &expired, &name] {
            assert!(!e.contains("Other(") && !e.contains("Error"), "{e}");
        }
    }
}
