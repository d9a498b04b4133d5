//! What a run records about itself in its output file (parquet's key-value metadata), so a
//! file found later says how it was made: `SELECT * FROM parquet_kv_metadata('*.parquet')`.

/// The facts of a run that go into its output file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunMetadata {
    /// The program's arguments, the program itself first.
    pub command_line: Vec<String>,
    pub seed: u64,
    /// `(shard, shards)`, 0-based; `(0, 1)` for an unsharded run.
    pub shard: (u32, u32),
    /// sonde's version.
    pub version: String,
    /// When the run started, microseconds since the Unix epoch.
    pub start_time_us: u64,
}

impl RunMetadata {
    /// The pairs written: keys under `sonde.`, values as text (the command line quoted for a
    /// POSIX shell, the start time in RFC 3339, UTC).
    pub fn key_values(&self) -> Vec<(String, String)> {
        let quoted: Vec<String> = self.command_line.iter().map(|a| shell_quote(a)).collect();
        [
            ("sonde.command_line", quoted.join(" ")),
            ("sonde.seed", self.seed.to_string()),
            ("sonde.shard", self.shard.0.to_string()),
            ("sonde.shards", self.shard.1.to_string()),
            ("sonde.version", self.version.clone()),
            ("sonde.start_time", rfc3339_micros(self.start_time_us)),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect()
    }
}

/// `arg` as a POSIX shell reads it back: as it is when it holds no special character, else in
/// single quotes.
fn shell_quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// Microseconds since the Unix epoch as RFC 3339 in UTC: `2026-11-26T07:40:12.123456Z`.
pub fn rfc3339_micros(us: u64) -> String {
    let secs = us / 1_000_000;
    let (days, in_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60,
        us % 1_000_000
    )
}

/// The Gregorian (year, month, day) of `days` after 1970-01-01: counted in 400-year eras of
/// 146,097 days, each starting on a March 1st so that the leap day ends its year.
fn civil_date(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_rfc3339() {
        assert_eq!(rfc3339_micros(0), "1970-01-01T00:00:00.000000Z");
        // 2000-02-29 (a leap day of a year divisible by 400), 23:59:59.5
        assert_eq!(
            rfc3339_micros(951_868_799_500_000),
            "2000-02-29T23:59:59.500000Z"
        );
        assert_eq!(
            rfc3339_micros(1_795_000_000_000_001),
            "2026-11-18T11:06:40.000001Z"
        );
        // 2100 is not a leap year: the day after 02-28 is 03-01.
        assert_eq!(
            rfc3339_micros(4_107_542_400_000_000),
            "2100-03-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn the_command_line_is_quoted_for_a_shell() {
        let meta = RunMetadata {
            command_line: [
                "sonde",
                "scan",
                "--lab",
                "l1",
                "-o",
                "a b.parquet",
                "it's",
                "",
            ]
            .map(String::from)
            .to_vec(),
            seed: 7,
            shard: (2, 4),
            version: "0.1.0".into(),
            start_time_us: 0,
        };
        let pairs = meta.key_values();
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            get("sonde.command_line"),
            Some(r"sonde scan --lab l1 -o 'a b.parquet' 'it'\''s' ''")
        );
        assert_eq!(get("sonde.seed"), Some("7"));
        assert_eq!(get("sonde.shard"), Some("2"));
        assert_eq!(get("sonde.shards"), Some("4"));
        assert_eq!(get("sonde.version"), Some("0.1.0"));
        assert_eq!(get("sonde.start_time"), Some("1970-01-01T00:00:00.000000Z"));
    }
}
