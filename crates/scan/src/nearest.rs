//! "Did you mean …?": the known name nearest to a mistyped one, for the errors of `-M` and other
//! names a user types.

/// The choice nearest to `word` when it is a likely typo of it: at most two edits away (a
/// swap of neighbours counts as one), and fewer edits than the word has letters.
pub fn nearest<'a>(word: &str, choices: &[&'a str]) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let limit = 2.min(word.chars().count().saturating_sub(1));
    choices
        .iter()
        .map(|&choice| (edits(&word, choice), choice))
        .filter(|&(n, _)| n <= limit)
        .min_by_key(|&(n, _)| n)
        .map(|(_, choice)| choice)
}

/// `" (did you mean X?)"` when a choice is near `word`, else nothing.
pub fn did_you_mean(word: &str, choices: &[&str]) -> String {
    nearest(word, choices).map_or_else(String::new, |c| format!(" (did you mean {c}?)"))
}

/// Edits (insert, delete, replace, swap of two neighbours) that turn `a` into `b`: the
/// optimal string alignment distance.
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // rows[i][j]: edits between a[..i] and b[..j] (names are short: a whole table is fine).
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPS: [&str; 4] = ["http", "https", "tls", "ssh"];

    #[test]
    fn typos_find_their_name_and_strangers_find_none() {
        assert_eq!(nearest("htpp", &APPS), Some("http"));
        assert_eq!(nearest("HTTP", &APPS), Some("http"));
        assert_eq!(nearest("htps", &APPS), Some("https"));
        assert_eq!(nearest("tcp_sin", &["tcp_syn", "udp"]), Some("tcp_syn"));
        assert_eq!(nearest("icmp", &["tcp_syn", "icmp_echo"]), None);
        assert_eq!(nearest("x", &APPS), None);
        assert_eq!(nearest("quic", &APPS), None);
        assert_eq!(did_you_mean("htpp", &APPS), " (did you mean http?)");
        assert_eq!(did_you_mean("quic", &APPS), "");
    }

    #[test]
    fn edits_count_a_swap_as_one() {
        assert_eq!(edits("htpp", "http"), 1);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
        assert_eq!(edits("same", "same"), 0);
    }
}
