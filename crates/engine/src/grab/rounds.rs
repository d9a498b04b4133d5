//! One output for every round of a grab. A connection is its address and port (sonde's TCP
//! keys its table and cookies by them), so one target's names (`sonde grab -I` lines
//! `address[:port],name`) cannot be open at once: round k grabs the targets that have a k-th
//! name, with that name, into the same output. The same rounds give `-M tls` its second
//! connection to servers that refused the full handshake's hello (TLS 1.0/1.1 only, or TLS 1.3
//! with groups rustls lacks): see [`SharedWriter::holding_back`].

use std::sync::{Arc, Mutex};

use sonde_scan::output::{Row, RowWriter};
use sonde_scan::reply::Value;

/// Which second connection may answer a server that refused the full handshake's hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// A protocol_version alert and no certificate: a server of TLS 1.0/1.1 only, which the
    /// first-flight hello alone reaches.
    FirstFlight,
    /// A handshake_failure alert before any ServerHello: nothing in common at TLS 1.3 (a
    /// server of FFDHE or P-521 groups only, which rustls lacks); a TLS 1.2 hello, whose DHE
    /// and RSA suites need no elliptic curve, may reach it.
    Tls12,
}

impl Retry {
    /// The retry a row asks for, if any (only rows without a certificate).
    fn of(row: &dyn Row) -> Option<Retry> {
        if !matches!(row.get("tls_cert_sha256"), Value::Null) {
            return None;
        }
        match row.get("tls_alert") {
            Value::Str(a) if a == "protocol_version" => Some(Retry::FirstFlight),
            Value::Str(a)
                if a == "handshake_failure" && matches!(row.get("tls_version"), Value::Null) =>
            {
                Some(Retry::Tls12)
            }
            _ => None,
        }
    }
}

/// Targets whose rows a round held back for another try (see [`SharedWriter::holding_back`]).
#[derive(Clone, Default)]
pub struct Refused(Arc<Mutex<Vec<(std::net::IpAddr, u16, Retry)>>>);

impl Refused {
    /// The targets held back for `retry`, taken out.
    pub fn take(&self, retry: Retry) -> Vec<(std::net::IpAddr, u16)> {
        let Ok(mut held) = self.0.lock() else {
            return Vec::new();
        };
        let (taken, kept) = std::mem::take(&mut *held)
            .into_iter()
            .partition::<Vec<_>, _>(|held| held.2 == retry);
        *held = kept;
        taken
            .into_iter()
            .map(|(addr, port, _)| (addr, port))
            .collect()
    }
}

/// One output for every round: each round's run writes through a [`SharedWriter::round`],
/// and only the last one finishes the file.
#[derive(Clone)]
pub struct SharedWriter(Arc<Mutex<Option<Box<dyn RowWriter + Send>>>>);

impl SharedWriter {
    pub fn new(writer: Box<dyn RowWriter + Send>) -> SharedWriter {
        SharedWriter(Arc::new(Mutex::new(Some(writer))))
    }

    /// The first round's writer for `-M tls`: a row whose server refused the full handshake's
    /// hello (see [`Retry`]) is not written; its target goes to `refused`, for a second
    /// connection with another hello.
    pub fn holding_back(&self, refused: &Refused) -> Box<dyn RowWriter + Send> {
        Box::new(RoundWriter {
            shared: self.clone(),
            first: true,
            last: false,
            refused: Some(refused.clone()),
        })
    }

    /// The writer of round `round`; the last one finishes the output. Rounds after the first
    /// keep only rows of targets named in that round (a round grabs each address over every
    /// port given, and a port without that round's name has had its row already).
    pub fn round(&self, round: usize, last: bool) -> Box<dyn RowWriter + Send> {
        Box::new(RoundWriter {
            shared: self.clone(),
            first: round == 0,
            last,
            refused: None,
        })
    }
}

struct RoundWriter {
    shared: SharedWriter,
    first: bool,
    last: bool,
    /// Where the rows held back go (the first round of a `-M tls` run).
    refused: Option<Refused>,
}

impl RoundWriter {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut dyn RowWriter) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mut guard = self
            .shared
            .0
            .lock()
            .map_err(|_| anyhow::anyhow!("output writer poisoned"))?;
        match guard.as_mut() {
            Some(writer) => f(writer.as_mut()),
            None => anyhow::bail!("the output was finished before the last round"),
        }
    }
}

impl RowWriter for RoundWriter {
    fn write(&mut self, row: &dyn Row) -> anyhow::Result<()> {
        if !self.first && matches!(row.get("name"), Value::Null) {
            return Ok(());
        }
        if let Some((refused, retry)) = self.refused.as_ref().zip(Retry::of(row)) {
            if let (Value::Str(addr), Value::Int(port)) = (row.get("saddr"), row.get("sport")) {
                if let (Ok(addr), Ok(port)) = (addr.parse(), u16::try_from(port)) {
                    if let Ok(mut held) = refused.0.lock() {
                        held.push((addr, port, retry));
                        return Ok(());
                    }
                }
            }
        }
        self.with(|w| w.write(row))
    }

    fn flush_rows(&mut self) -> anyhow::Result<()> {
        self.with(|w| w.flush_rows())
    }

    fn end_batch(&mut self) -> anyhow::Result<()> {
        self.with(|w| w.end_batch())
    }

    fn finish(self: Box<Self>) -> anyhow::Result<()> {
        if !self.last {
            return self.with(|w| w.flush_rows());
        }
        let writer = self.shared.0.lock().ok().and_then(|mut guard| guard.take());
        match writer {
            Some(writer) => writer.finish(),
            None => Ok(()),
        }
    }
}
