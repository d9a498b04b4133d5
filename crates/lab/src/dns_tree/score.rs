//! Scoring `sonde dns` rows (ndjson, one object per (name, type): name, type, status, chain,
//! answers of {name, type, ttl, data}) against the DNS tree's truth: each truth row is
//! **correct** when a row has its rcode as status, its chain, and the sorted data of its
//! answers of the asked type; **wrong** when the row differs (by rcode, chain or answers, the
//! first that differs); **missing** when no row asks it. Rows the truth does not know are
//! **extra**.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde::Deserialize;

use super::spec::{Tree, TruthRow};

/// Examples kept of each kind of wrong row.
const EXAMPLES: usize = 3;

/// One row of `sonde dns` output, as far as the score reads it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct DnsRow {
    pub name: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub status: String,
    #[serde(default)]
    pub chain: Vec<String>,
    #[serde(default)]
    pub answers: Vec<DnsAnswer>,
}

/// One record of a row's answer section.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct DnsAnswer {
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type")]
    pub rtype: String,
    pub data: String,
}

/// How a row differs from its truth, in the order they are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wrong {
    Rcode,
    Chain,
    Answers,
}

impl Wrong {
    fn name(self) -> &'static str {
        match self {
            Wrong::Rcode => "rcode",
            Wrong::Chain => "chain",
            Wrong::Answers => "answers",
        }
    }
}

/// The score of a file of dns rows.
#[derive(Debug, Default, PartialEq)]
pub struct DnsScore {
    /// Truth rows, and how they fared.
    pub expected: usize,
    pub correct: usize,
    pub missing: usize,
    /// Wrong rows by kind, each with up to EXAMPLES examples.
    pub wrong: BTreeMap<Wrong, (usize, Vec<String>)>,
    /// Rows for questions the truth does not ask (examples too).
    pub extra: usize,
    pub extra_examples: Vec<String>,
    /// Rows asking a question an earlier row asked (only the first is scored).
    pub repeated: usize,
    /// Examples of missing questions.
    pub missing_examples: Vec<String>,
}

impl DnsScore {
    pub fn wrong_count(&self) -> usize {
        self.wrong.values().map(|(n, _)| n).sum()
    }

    /// Lines for stderr: examples of what was wrong, missing or extra.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        for (kind, (n, examples)) in &self.wrong {
            notes.push(format!(
                "wrong {} ({n}): {}",
                kind.name(),
                examples.join("; ")
            ));
        }
        if self.missing > 0 {
            notes.push(format!(
                "missing ({}): {}",
                self.missing,
                self.missing_examples.join("; ")
            ));
        }
        if self.extra > 0 {
            notes.push(format!(
                "extra ({}): {}",
                self.extra,
                self.extra_examples.join("; ")
            ));
        }
        if self.repeated > 0 {
            notes.push(format!(
                "note: {} rows ask a question an earlier row asked; only the first of each is scored",
                self.repeated
            ));
        }
        notes
    }
}

impl fmt::Display for DnsScore {
    /// `dns: correct N of M (P %), wrong W (rcode a, chain b, answers c), missing X, extra E`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let share = if self.expected == 0 {
            String::new()
        } else {
            format!(
                " ({:.3} %)",
                100.0 * self.correct as f64 / self.expected as f64
            )
        };
        let kinds = [Wrong::Rcode, Wrong::Chain, Wrong::Answers]
            .map(|k| format!("{} {}", k.name(), self.wrong.get(&k).map_or(0, |w| w.0)));
        write!(
            f,
            "dns: correct {} of {}{share}, wrong {} ({}), missing {}, extra {}",
            self.correct,
            self.expected,
            self.wrong_count(),
            kinds.join(", "),
            self.missing,
            self.extra
        )
    }
}

/// A question's key: the name lowercase with its trailing dot, the type uppercase.
fn key(name: &str, rtype: &str) -> (String, String) {
    let mut name = name.to_ascii_lowercase();
    if !name.ends_with('.') {
        name.push('.');
    }
    (name, rtype.to_ascii_uppercase())
}

/// A row's CNAME chain: its `chain` field where it has one (the peers' rows), else the
/// targets of the CNAMEs of its answer section, in order (sonde dns writes the chain there).
fn row_chain(row: &DnsRow) -> Vec<String> {
    if !row.chain.is_empty() {
        return row.chain.clone();
    }
    row.answers
        .iter()
        .filter(|a| a.rtype.eq_ignore_ascii_case("CNAME"))
        .map(|a| a.data.clone())
        .collect()
}

/// How `row` differs from `truth`, if it does.
fn differs(truth: &TruthRow, row: &DnsRow) -> Option<(Wrong, String)> {
    let asked = format!("{} {}", truth.name, truth.rtype);
    if !row.status.eq_ignore_ascii_case(truth.rcode.as_str()) {
        return Some((
            Wrong::Rcode,
            format!("{asked}: {}, want {}", row.status, truth.rcode.as_str()),
        ));
    }
    let chain: Vec<String> = row_chain(row).iter().map(|c| key(c, "").0).collect();
    if chain != truth.chain {
        return Some((
            Wrong::Chain,
            format!("{asked}: chain {chain:?}, want {:?}", truth.chain),
        ));
    }
    let rtype = truth.rtype.to_string();
    let mut answers: Vec<String> = row
        .answers
        .iter()
        .filter(|a| a.rtype.eq_ignore_ascii_case(&rtype))
        .map(|a| a.data.clone())
        .collect();
    answers.sort();
    if answers != truth.answers {
        return Some((
            Wrong::Answers,
            format!("{asked}: {answers:?}, want {:?}", truth.answers),
        ));
    }
    None
}

/// Scores `rows` against the truth of `tree`.
pub fn score_rows(tree: &Tree, rows: impl IntoIterator<Item = DnsRow>) -> DnsScore {
    let mut score = DnsScore::default();
    let mut by_key: HashMap<(String, String), DnsRow> = HashMap::new();
    for row in rows {
        match by_key.entry(key(&row.name, &row.rtype)) {
            std::collections::hash_map::Entry::Occupied(_) => score.repeated += 1,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(row);
            }
        }
    }
    let keep = |examples: &mut Vec<String>, text: String| {
        if examples.len() < EXAMPLES {
            examples.push(text);
        }
    };
    for truth in tree.truth() {
        score.expected += 1;
        let Some(row) = by_key.remove(&key(&truth.name, &truth.rtype.to_string())) else {
            score.missing += 1;
            keep(
                &mut score.missing_examples,
                format!("{} {}", truth.name, truth.rtype),
            );
            continue;
        };
        match differs(&truth, &row) {
            None => score.correct += 1,
            Some((kind, text)) => {
                let entry = score.wrong.entry(kind).or_default();
                entry.0 += 1;
                keep(&mut entry.1, text);
            }
        }
    }
    let mut extra: Vec<_> = by_key.into_keys().collect();
    extra.sort();
    score.extra = extra.len();
    for (name, rtype) in extra.into_iter().take(EXAMPLES) {
        score.extra_examples.push(format!("{name} {rtype}"));
    }
    score
}

/// Whether the file at `path` holds dns rows: its first line is a JSON object with name, type
/// and status (and no saddr, which scan and grab rows have).
pub fn is_dns_file(path: &Path) -> Result<bool> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read results {}", path.display()))?;
    let mut first = String::new();
    for line in BufReader::new(file.take(1 << 20)).lines() {
        let Ok(line) = line else { return Ok(false) };
        if !line.trim().is_empty() {
            first = line;
            break;
        }
    }
    let Ok(serde_json::Value::Object(o)) = serde_json::from_str(&first) else {
        return Ok(false);
    };
    Ok(["name", "type", "status"]
        .iter()
        .all(|k| o.contains_key(*k))
        && !o.contains_key("saddr"))
}

/// Reads the dns rows of an ndjson file.
pub fn read_rows(path: &Path) -> Result<Vec<DnsRow>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read results {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("cannot read results {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(&line).map_err(|e| {
            anyhow!(
                "{} line {} is not a dns row as sonde dns writes it ({e}); give sonde dns's ndjson output",
                path.display(),
                i + 1
            )
        })?;
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_tree::spec::Rtype;

    fn tree() -> Tree {
        Tree::new(7, 4, 1)
    }

    /// The row a perfect client writes for a truth row.
    fn row_of(t: &TruthRow) -> DnsRow {
        let mut answers: Vec<DnsAnswer> = t
            .chain
            .iter()
            .map(|c| DnsAnswer {
                name: String::new(),
                rtype: "CNAME".into(),
                data: c.clone(),
            })
            .collect();
        // In the order a server might send them: not sorted.
        answers.extend(t.answers.iter().rev().map(|a| DnsAnswer {
            name: String::new(),
            rtype: t.rtype.to_string(),
            data: a.clone(),
        }));
        DnsRow {
            name: t.name.to_uppercase(),
            rtype: t.rtype.to_string().to_lowercase(),
            status: t.rcode.as_str().into(),
            chain: t.chain.clone(),
            answers,
        }
    }

    #[test]
    fn every_truth_row_written_back_is_correct() {
        let t = tree();
        let rows: Vec<DnsRow> = t.truth().map(|r| row_of(&r)).collect();
        let s = score_rows(&t, rows);
        assert_eq!(s.expected, t.truth().count());
        assert_eq!(
            (s.correct, s.wrong_count(), s.missing, s.extra),
            (s.expected, 0, 0, 0)
        );
        assert!(s.to_string().starts_with(&format!(
            "dns: correct {0} of {0} (100.000 %), wrong 0",
            s.expected
        )));
    }

    #[test]
    fn wrong_missing_and_extra_are_told_apart() {
        let t = tree();
        let mut rows: Vec<DnsRow> = t.truth().map(|r| row_of(&r)).collect();
        let find = |rows: &[DnsRow], name: &str, rtype: Rtype| {
            rows.iter()
                .position(|r| {
                    r.name.eq_ignore_ascii_case(name)
                        && r.rtype.eq_ignore_ascii_case(&rtype.to_string())
                })
                .unwrap()
        };
        // A lame name answered as a timeout: a wrong rcode.
        let i = find(&rows, "www.lame.test.", Rtype::A);
        rows[i].status = "TIMEOUT".into();
        // A chain cut short.
        let i = find(&rows, "chain.d1.example.", Rtype::A);
        rows[i].chain.pop();
        rows[i].answers.retain(|a| a.rtype != "CNAME");
        // An address changed, in two rows.
        for name in ["www.d0.test.", "h0.d2.test."] {
            let i = find(&rows, name, Rtype::A);
            let last = rows[i].answers.len() - 1;
            rows[i].answers[last].data = "198.18.0.1".into();
        }
        // A row gone, one asked twice, one the truth does not ask.
        let i = find(&rows, "big.d3.example.", Rtype::Txt);
        rows.remove(i);
        rows.push(rows[0].clone());
        let mut extra = rows[0].clone();
        extra.name = "nothing.d0.test.".into();
        extra.rtype = "A".into();
        rows.push(extra);
        let s = score_rows(&t, rows);
        assert_eq!(s.correct, s.expected - 5);
        assert_eq!(s.wrong[&Wrong::Rcode].0, 1);
        assert_eq!(s.wrong[&Wrong::Chain].0, 1);
        assert_eq!(s.wrong[&Wrong::Answers].0, 2);
        assert_eq!((s.missing, s.extra, s.repeated), (1, 1, 1));
        assert_eq!(
            s.wrong[&Wrong::Rcode].1,
            ["www.lame.test. A: TIMEOUT, want SERVFAIL"]
        );
        assert_eq!(s.missing_examples, ["big.d3.example. TXT"]);
        assert_eq!(s.extra_examples, ["nothing.d0.test. A"]);
        let line = s.to_string();
        assert!(
            line.contains("wrong 4 (rcode 1, chain 1, answers 2), missing 1, extra 1"),
            "{line}"
        );
        let notes = s.notes().join("\n");
        assert!(
            notes.contains("wrong answers (2): www.d0.test. A: [\"198.18.0.1\"]"),
            "{notes}"
        );
    }

    #[test]
    fn a_txt_answer_is_compared_in_presentation_form() {
        let t = tree();
        let truth = t.truth().find(|r| r.name == "big.d1.example.").unwrap();
        let mut row = row_of(&truth);
        assert!(differs(&truth, &row).is_none());
        // The strings run together, as a client that joined them would write it.
        row.answers[0].data = row.answers[0].data.replace("\" \"", "");
        assert_eq!(differs(&truth, &row).unwrap().0, Wrong::Answers);
    }

    #[test]
    fn dns_files_are_told_from_scan_rows() {
        let dir = std::env::temp_dir().join(format!("sonde-dns-score-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dns = dir.join("dns.ndjson");
        std::fs::write(
            &dns,
            "\n{\"name\":\"www.d0.test.\",\"type\":\"A\",\"status\":\"NOERROR\",\"chain\":[],\"answers\":[]}\n",
        )
        .unwrap();
        let scan = dir.join("scan.ndjson");
        std::fs::write(
            &scan,
            "{\"saddr\":\"198.18.0.1\",\"name\":\"x\",\"type\":\"A\",\"status\":\"s\"}\n",
        )
        .unwrap();
        assert!(is_dns_file(&dns).unwrap());
        assert!(!is_dns_file(&scan).unwrap());
        assert_eq!(read_rows(&dns).unwrap().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
