//! The lab's certificate authority: made at `up` (openssl), it signs the certificate of every
//! TLS server of the lab (nginx on 443, the services), so a client given the CA's certificate
//! (`sonde grab --root-cas`, `lab status`'s `tls_ca`) validates their chains as it would a
//! real site's. A self-signed server certificate never validates: it is a CA's own
//! (basic constraints CA:TRUE), which no validator accepts for a server.
//!
//! Each server certificate names `sonde.test` and `*.sonde.test` (RFC 6761's reserved
//! top-level domain, for names given with `--tls-sni` or an `-I` file), and every address of
//! a population of at most [`MAX_ADDRESS_NAMES`] addresses, so a grab of a small lab's
//! addresses validates too. The CA's key stays in the lab's folder, readable by root only,
//! and goes with the lab at `down`.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use ipnet::{Ipv4Net, Ipv6Net};

use crate::cmd::run;
use crate::files::{path_arg, sha256_hex, write};
use crate::state;

/// The DNS names every server certificate of a lab carries.
pub const SERVER_NAMES: [&str; 2] = ["sonde.test", "*.sonde.test"];

/// Populations of at most this many addresses (IPv4 and IPv6 together) are named address by
/// address in the certificates; a larger one would make every handshake carry kilobytes.
pub const MAX_ADDRESS_NAMES: u64 = 256;

/// The certificate's key: ECDSA P-256, whose signatures cost far less CPU than RSA's, so a
/// TLS handshake flood is not limited by the server's signing.
pub(crate) const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
/// An RSA key, for servers whose clients need RSA key exchange (TLS 1.0 era suites).
pub(crate) const RSA_KEY: [&str; 4] =
    ["-newkey", "rsa:2048", "-pkeyopt", "rsa_keygen_pubexp:65537"];

/// Days the CA and its certificates are valid.
const DAYS: &str = "3650";

/// A lab's CA: its folder (certificate, key, serial numbers) and what its certificates name.
pub(crate) struct Ca {
    dir: PathBuf,
    alt_names: String,
}

impl Ca {
    /// Makes lab `name`'s CA, whose certificates will name `population` (and `population6`)
    /// address by address when they are small enough.
    pub(crate) fn make(
        name: &str,
        population: Ipv4Net,
        population6: Option<Ipv6Net>,
    ) -> Result<Ca> {
        let dir = state::scratch_dir(name, "-ca")?;
        let (key, cert) = (
            path_arg(&dir.join("ca.key"))?,
            path_arg(&dir.join("ca.pem"))?,
        );
        let subject = format!("/O=sonde/CN=sonde lab {name} CA");
        let mut args = vec!["req", "-x509", "-nodes", "-days", DAYS];
        args.extend_from_slice(&EC_KEY);
        args.extend_from_slice(&["-subj", &subject, "-keyout", &key, "-out", &cert]);
        args.extend_from_slice(&[
            "-addext",
            "basicConstraints=critical,CA:TRUE,pathlen:0",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        run("openssl", &args)?;
        let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o600);
        std::fs::set_permissions(&key, owner_only)
            .map_err(|e| anyhow!("cannot keep {key} to root: {e}"))?;
        Ok(Ca {
            dir,
            alt_names: alt_names(population, population6),
        })
    }

    /// The CA's certificate (PEM): what a client trusts to validate the lab's servers.
    pub(crate) fn pem(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A server certificate with `key_args` (EC_KEY or RSA_KEY) and `subject`, signed by this
    /// CA, written to `{stem}cert.pem` and `{stem}key.pem` in `dir`; returns the SHA-256 of
    /// its DER form, which is what a TLS client sees.
    pub(crate) fn sign(
        &self,
        dir: &Path,
        stem: &str,
        key_args: &[&str],
        subject: &str,
    ) -> Result<String> {
        let file = |suffix: &str| path_arg(&dir.join(format!("{stem}{suffix}")));
        let (key, csr, cert, der, ext) = (
            file("key.pem")?,
            file("cert.csr")?,
            file("cert.pem")?,
            file("cert.der")?,
            file("cert.ext")?,
        );
        let mut args = vec!["req", "-new", "-nodes"];
        args.extend_from_slice(key_args);
        args.extend_from_slice(&["-subj", subject, "-keyout", &key, "-out", &csr]);
        run("openssl", &args)?;
        write(Path::new(&ext), self.extensions().as_bytes())?;
        let (ca_cert, ca_key, serial) = (
            path_arg(&self.pem())?,
            path_arg(&self.dir.join("ca.key"))?,
            path_arg(&self.dir.join("ca.srl"))?,
        );
        run(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_cert,
                "-CAkey",
                &ca_key,
                "-CAserial",
                &serial,
                "-CAcreateserial",
                "-days",
                DAYS,
                "-extfile",
                &ext,
                "-out",
                &cert,
            ],
        )?;
        run(
            "openssl",
            &["x509", "-in", &cert, "-outform", "DER", "-out", &der],
        )?;
        let bytes = std::fs::read(&der).map_err(|e| anyhow!("cannot read {der}: {e}"))?;
        Ok(sha256_hex(&bytes))
    }

    /// The extensions of a server certificate: not a CA, for TLS servers (RSA key exchange
    /// included), and the names.
    fn extensions(&self) -> String {
        format!(
            "basicConstraints = critical, CA:FALSE\n\
             keyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = serverAuth\n\
             subjectAltName = {}\n",
            self.alt_names
        )
    }
}

/// subjectAltName's value: the DNS names, then the populations' addresses when there are at
/// most MAX_ADDRESS_NAMES of them.
fn alt_names(population: Ipv4Net, population6: Option<Ipv6Net>) -> String {
    let mut names: Vec<String> = SERVER_NAMES.iter().map(|n| format!("DNS:{n}")).collect();
    let v4 = 1u64 << (32 - population.prefix_len());
    let v6 = population6.map_or(0, |p| {
        1u64.checked_shl(128 - u32::from(p.prefix_len()))
            .unwrap_or(u64::MAX)
    });
    if v4.saturating_add(v6) <= MAX_ADDRESS_NAMES {
        // Every address, the first and last too: the lab answers on all of them.
        let (first, last) = (
            u32::from(population.network()),
            u32::from(population.broadcast()),
        );
        names.extend((first..=last).map(|a| format!("IP:{}", std::net::Ipv4Addr::from(a))));
        if let Some(p) = population6 {
            names.extend(p.hosts().map(|a| format!("IP:{a}")));
        }
    }
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_populations_are_named_address_by_address() {
        let small = alt_names("198.18.0.0/30".parse().unwrap(), None);
        assert_eq!(
            small,
            "DNS:sonde.test, DNS:*.sonde.test, IP:198.18.0.0, IP:198.18.0.1, IP:198.18.0.2, IP:198.18.0.3"
        );
        let both = alt_names(
            "198.18.0.0/31".parse().unwrap(),
            Some("2001:2::/127".parse().unwrap()),
        );
        assert!(
            both.ends_with("IP:198.18.0.1, IP:2001:2::, IP:2001:2::1"),
            "{both}"
        );
        let a24 = alt_names("198.18.0.0/24".parse().unwrap(), None);
        assert_eq!(a24.matches("IP:").count(), 256);
        let large = alt_names(
            "198.18.0.0/16".parse().unwrap(),
            Some("2001:2::/64".parse().unwrap()),
        );
        assert_eq!(large, "DNS:sonde.test, DNS:*.sonde.test");
    }
}
