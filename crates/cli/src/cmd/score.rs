//! `sonde lab score`: its arguments, and the score line printed (the scoring lives in
//! `sonde_lab::score`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use ipnet::IpNet;
use sonde_lab::score::{self, Format, Module, ScoreRequest};
use sonde_lab::Answer;
use sonde_scan::output::OutputFormat;

#[derive(Args)]
pub struct ScoreArgs {
    /// Lab name.
    #[arg(long, default_value = "lab")]
    name: String,
    /// The module that made the results (default: from the file: its classification column —
    /// synack/rst: tcp_syn, echoreply: icmp_echo, udp/unreach: udp, dns: dns — or a status
    /// column: grab; tcp_syn when it has neither).
    #[arg(long, value_enum)]
    module: Option<ModuleArg>,
    /// Ports to score (default: the ports the results name: sport, the target's, for scans and
    /// grabs alike (a `port` column in other tools' rows); 0, ICMP, for icmp_echo).
    #[arg(long, value_delimiter = ',')]
    port: Vec<u16>,
    /// The answer that counts as found (default: the module's: synack for tcp_syn, echo for
    /// icmp_echo, unreach or dns for udp, dns for dns). `echo` scores port 0, the host: any
    /// answer from an address counts for it.
    #[arg(long, value_enum)]
    answer: Option<AnswerArg>,
    /// Count only the truth inside these prefixes, the range that was scanned (default: the
    /// lab's populations that hold a result: an IPv4 scan is not scored on the IPv6
    /// population). Results outside them are left out.
    #[arg(long, value_delimiter = ',')]
    within: Vec<IpNet>,
    /// The results' format (default: from the extension, else from the content).
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// The results file.
    results: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModuleArg {
    #[value(name = "tcp_syn")]
    TcpSyn,
    #[value(name = "icmp_echo")]
    IcmpEcho,
    Udp,
    Dns,
    Grab,
}

impl From<ModuleArg> for Module {
    fn from(arg: ModuleArg) -> Module {
        match arg {
            ModuleArg::TcpSyn => Module::TcpSyn,
            ModuleArg::IcmpEcho => Module::IcmpEcho,
            ModuleArg::Udp => Module::Udp,
            ModuleArg::Dns => Module::Dns,
            ModuleArg::Grab => Module::Grab,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AnswerArg {
    Synack,
    Rst,
    Echo,
    Unreach,
    Dns,
}

impl From<AnswerArg> for Answer {
    fn from(arg: AnswerArg) -> Answer {
        match arg {
            AnswerArg::Synack => Answer::Synack,
            AnswerArg::Rst => Answer::Rst,
            AnswerArg::Echo => Answer::Echo,
            AnswerArg::Unreach => Answer::Unreach,
            AnswerArg::Dns => Answer::Dns,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FormatArg {
    Csv,
    Ndjson,
    Parquet,
}

impl From<FormatArg> for Format {
    fn from(arg: FormatArg) -> Format {
        match arg {
            FormatArg::Csv => Format::Csv,
            FormatArg::Ndjson => Format::Ndjson,
            FormatArg::Parquet => Format::Parquet,
        }
    }
}

/// The format a results file's name says, read as `scan -o` and `grab -o` write it.
fn named_format(results: &std::path::Path) -> Option<Format> {
    OutputFormat::from_extension(results).map(|format| match format {
        OutputFormat::Csv => Format::Csv,
        OutputFormat::Ndjson => Format::Ndjson,
        OutputFormat::Parquet => Format::Parquet,
    })
}

pub fn run(args: ScoreArgs) -> Result<()> {
    let status = sonde_lab::status(&args.name)?;
    let request = ScoreRequest {
        module: args.module.map(Module::from),
        port: args.port,
        answer: args.answer.map(Answer::from),
        within: args.within,
        format: args
            .format
            .map(Format::from)
            .or_else(|| named_format(&args.results)),
        results: args.results,
    };
    let scored = score::score(&status, &request)?;
    for note in &scored.notes {
        eprintln!("{note}");
    }
    crate::say(scored.line);
    Ok(())
}
