//! ZMap-style output filters: `success = 1 && (ttl > 32 || classification = rst)`.
//!
//! Grammar (`&&`/`and` binds tighter than `||`/`or`):
//! ```text
//! any        := all (("||" | "or") all)*
//! all        := primary (("&&" | "and") primary)*
//! primary    := "(" any ")" | comparison
//! comparison := FIELD ("=" | "==" | "!=" | "<" | ">" | "<=" | ">=") VALUE
//! VALUE      := integer | bare word | 'quoted' | "quoted"
//! ```
//! Values are checked against the field's type when parsing, so matching never fails. `and`
//! and `or` are keywords in any case: quote a value spelled that way.

use std::cmp::Ordering;
use std::fmt;

use anyhow::{anyhow, Result};

use super::fields::{find_field, known_names};
use crate::reply::{FieldType, Reply, Value};

/// Parentheses nest at most this deep, so a hostile expression cannot overflow the stack.
const MAX_DEPTH: usize = 64;

/// Decides which replies are written.
#[derive(Clone, Debug)]
pub struct OutputFilter {
    expr: Expr,
    text: String,
}

impl OutputFilter {
    /// Parses a filter expression. Errors name the offending token and its column (1-based).
    pub fn parse(text: &str) -> Result<OutputFilter> {
        let tokens = tokenize(text)?;
        let mut parser = Parser { tokens, next: 0 };
        let expr = parser.any(0)?;
        parser.expect_end()?;
        Ok(OutputFilter {
            expr,
            text: text.trim().to_string(),
        })
    }

    /// A filter every reply passes (failures and repeats included).
    pub fn accept_all() -> OutputFilter {
        OutputFilter {
            expr: Expr::All(Vec::new()),
            text: String::new(),
        }
    }

    /// Whether `r` should be written.
    pub fn matches(&self, r: &Reply) -> bool {
        self.expr.eval(r)
    }
}

/// `success = 1`, as ZMap: only hits are written unless asked otherwise.
impl Default for OutputFilter {
    fn default() -> Self {
        let success = Comparison {
            field: "success",
            op: CmpOp::Eq,
            literal: Value::Bool(true),
        };
        OutputFilter {
            expr: Expr::Cmp(success),
            text: "success = 1".to_string(),
        }
    }
}

impl fmt::Display for OutputFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

// ---- evaluation ----

#[derive(Clone, Debug)]
enum Expr {
    Cmp(Comparison),
    /// True when every member is (so the empty list accepts everything).
    All(Vec<Expr>),
    Any(Vec<Expr>),
}

impl Expr {
    fn eval(&self, r: &Reply) -> bool {
        match self {
            Expr::Cmp(c) => c.matches(&r.get(c.field)),
            Expr::All(members) => members.iter().all(|e| e.eval(r)),
            Expr::Any(members) => members.iter().any(|e| e.eval(r)),
        }
    }
}

#[derive(Clone, Debug)]
struct Comparison {
    field: &'static str,
    op: CmpOp,
    /// Of the field's type: checked when parsing.
    literal: Value,
}

impl Comparison {
    fn matches(&self, value: &Value) -> bool {
        let ordering = match (value, &self.literal) {
            // An absent value equals nothing, so it is only ever "not equal".
            (Value::Null, _) => return self.op == CmpOp::Ne,
            (Value::Bool(have), Value::Bool(want)) => have.cmp(want),
            (Value::Int(have), Value::Int(want)) => have.cmp(want),
            (Value::Str(have), Value::Str(want)) => have.cmp(want),
            _ => return false,
        };
        self.op.holds(ordering)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

impl CmpOp {
    /// Whether `value <op> literal` holds, given how value compares to literal.
    fn holds(self, ordering: Ordering) -> bool {
        match self {
            CmpOp::Eq => ordering.is_eq(),
            CmpOp::Ne => ordering.is_ne(),
            CmpOp::Lt => ordering.is_lt(),
            CmpOp::Gt => ordering.is_gt(),
            CmpOp::Le => ordering.is_le(),
            CmpOp::Ge => ordering.is_ge(),
        }
    }
}

// ---- tokens ----

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    /// A field name, number or bare value.
    Word,
    /// A quoted value; the token's `value` holds it without the quotes.
    Quoted,
    Op(CmpOp),
    And,
    Or,
    Open,
    Close,
    End,
}

#[derive(Clone, Debug)]
struct Token<'a> {
    kind: Kind,
    /// The token as written, for error messages.
    text: &'a str,
    /// The token's value: `text` without quotes for quoted strings.
    value: &'a str,
    /// 1-based character column.
    column: usize,
}

impl Token<'_> {
    fn describe(&self) -> String {
        match self.kind {
            Kind::End => "end of filter".to_string(),
            _ => format!("`{}`", self.text),
        }
    }
}

fn tokenize(src: &str) -> Result<Vec<Token<'_>>> {
    let mut tokens = Vec::new();
    let mut at = 0;
    while let Some(c) = src[at..].chars().next() {
        if c.is_whitespace() {
            at += c.len_utf8();
            continue;
        }
        let column = column_of(src, at);
        let (kind, len) = lex_one(&src[at..])
            .map_err(|why| anyhow!("bad output filter at column {column}: {why}"))?;
        let text = &src[at..at + len];
        let value = if kind == Kind::Quoted {
            &text[1..len - 1]
        } else {
            text
        };
        tokens.push(Token {
            kind,
            text,
            value,
            column,
        });
        at += len;
    }
    let column = column_of(src, src.len());
    tokens.push(Token {
        kind: Kind::End,
        text: "",
        value: "",
        column,
    });
    Ok(tokens)
}

fn column_of(src: &str, byte: usize) -> usize {
    src[..byte].chars().count() + 1
}

/// The token at the start of `rest` (which starts with a non-space) and its length in bytes.
fn lex_one(rest: &str) -> std::result::Result<(Kind, usize), String> {
    const SYMBOLS: &[(&str, Kind)] = &[
        ("&&", Kind::And),
        ("||", Kind::Or),
        ("==", Kind::Op(CmpOp::Eq)),
        ("!=", Kind::Op(CmpOp::Ne)),
        ("<=", Kind::Op(CmpOp::Le)),
        (">=", Kind::Op(CmpOp::Ge)),
        ("=", Kind::Op(CmpOp::Eq)),
        ("<", Kind::Op(CmpOp::Lt)),
        (">", Kind::Op(CmpOp::Gt)),
        ("(", Kind::Open),
        (")", Kind::Close),
    ];
    if let Some((sym, kind)) = SYMBOLS.iter().find(|(sym, _)| rest.starts_with(sym)) {
        return Ok((kind.clone(), sym.len()));
    }
    let first = rest.chars().next().unwrap_or(' ');
    if first == '"' || first == '\'' {
        return lex_quoted(rest, first);
    }
    let len = rest.find(|c: char| !is_word_char(c)).unwrap_or(rest.len());
    if len == 0 {
        return Err(format!("unexpected character `{first}`"));
    }
    let kind = match &rest[..len] {
        w if w.eq_ignore_ascii_case("and") => Kind::And,
        w if w.eq_ignore_ascii_case("or") => Kind::Or,
        _ => Kind::Word,
    };
    Ok((kind, len))
}

fn lex_quoted(rest: &str, quote: char) -> std::result::Result<(Kind, usize), String> {
    match rest[1..].find(quote) {
        Some(end) => Ok((Kind::Quoted, end + 2)),
        None => Err(format!("unterminated string `{rest}`")),
    }
}

/// Characters of field names, numbers and bare values such as addresses (`10.0.0.1`, `::1`).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '.' | ':' | '-' | '/' | '+')
}

// ---- parsing ----

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    next: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> &Token<'a> {
        // The token list always ends with `End`, and `bump` never moves past it.
        &self.tokens[self.next.min(self.tokens.len() - 1)]
    }

    fn bump(&mut self) -> Token<'a> {
        let token = self.peek().clone();
        if token.kind != Kind::End {
            self.next += 1;
        }
        token
    }

    fn any(&mut self, depth: usize) -> Result<Expr> {
        let mut members = vec![self.all(depth)?];
        while self.peek().kind == Kind::Or {
            self.bump();
            members.push(self.all(depth)?);
        }
        Ok(flatten(members, Expr::Any))
    }

    fn all(&mut self, depth: usize) -> Result<Expr> {
        let mut members = vec![self.primary(depth)?];
        while self.peek().kind == Kind::And {
            self.bump();
            members.push(self.primary(depth)?);
        }
        Ok(flatten(members, Expr::All))
    }

    fn primary(&mut self, depth: usize) -> Result<Expr> {
        if self.peek().kind != Kind::Open {
            return self.comparison();
        }
        let open = self.bump();
        if depth >= MAX_DEPTH {
            return Err(at(
                &open,
                &format!("parentheses nest deeper than {MAX_DEPTH}"),
            ));
        }
        let inner = self.any(depth + 1)?;
        let close = self.bump();
        if close.kind != Kind::Close {
            return Err(unexpected(&close, "`)`"));
        }
        Ok(inner)
    }

    fn comparison(&mut self) -> Result<Expr> {
        let name = self.bump();
        if name.kind != Kind::Word {
            return Err(unexpected(&name, "a field name"));
        }
        let field = find_field(name.value).ok_or_else(|| {
            let why = format!(
                "unknown field {}; known fields: {}",
                name.describe(),
                known_names()
            );
            at(&name, &why)
        })?;
        let op_token = self.bump();
        let Kind::Op(op) = op_token.kind else {
            return Err(unexpected(
                &op_token,
                "a comparison operator (= != < > <= >=)",
            ));
        };
        // Text order would rank 10.0.0.10 before 10.0.0.9: refuse rather than mislead.
        if field.kind.is_text() && !matches!(op, CmpOp::Eq | CmpOp::Ne) {
            let why = format!(
                "operator {} on text field `{}`; use = or !=",
                op_token.describe(),
                field.name
            );
            return Err(at(&op_token, &why));
        }
        let value = self.bump();
        if !matches!(value.kind, Kind::Word | Kind::Quoted) {
            return Err(unexpected(&value, &format!("a value for `{}`", field.name)));
        }
        let literal = literal_for(field.kind, field.name, &value)?;
        Ok(Expr::Cmp(Comparison {
            field: field.name,
            op,
            literal,
        }))
    }

    fn expect_end(&mut self) -> Result<()> {
        let token = self.bump();
        match token.kind {
            Kind::End => Ok(()),
            _ => Err(unexpected(&token, "`&&`, `||` or end of filter")),
        }
    }
}

/// One member stands for itself; several make an `All`/`Any` node.
fn flatten(mut members: Vec<Expr>, node: fn(Vec<Expr>) -> Expr) -> Expr {
    match members.len() {
        1 => members.remove(0),
        _ => node(members),
    }
}

/// The value of `token` as a literal of the field's type.
fn literal_for(kind: FieldType, field: &str, token: &Token<'_>) -> Result<Value> {
    let text = token.value;
    match kind {
        k if k.is_int() => text.parse().map(Value::Int).map_err(|_| {
            at(
                token,
                &format!(
                    "{} is not an integer (field `{field}` is)",
                    token.describe()
                ),
            )
        }),
        FieldType::Bool => parse_bool(text).map(Value::Bool).ok_or_else(|| {
            let why = format!("{} is not a boolean (1, 0, true, false)", token.describe());
            at(token, &why)
        }),
        _ => Ok(Value::Str(text.to_string())),
    }
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" => Some(true),
        "0" => Some(false),
        t if t.eq_ignore_ascii_case("true") => Some(true),
        t if t.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

fn unexpected(token: &Token<'_>, expected: &str) -> anyhow::Error {
    at(
        token,
        &format!("unexpected {}, expected {expected}", token.describe()),
    )
}

fn at(token: &Token<'_>, why: &str) -> anyhow::Error {
    anyhow!("bad output filter at column {}: {why}", token.column)
}
