//! `agentd bench …`: the benchmarks live in their own workspace member (`benches/agentd-bench`,
//! binary `agentd-bench`), so this binary carries no benchmark code. This command runs that
//! binary — next to this executable, else on `PATH` — with the same arguments and global options.

use super::Cli;
use clap::Args;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The binary that holds the benchmarks.
pub const BENCH_BIN: &str = "agentd-bench";

/// Everything after `agentd bench`, passed through unchanged.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// Where `agentd-bench` is: beside `exe`, else the first match in `path` (a `PATH` value).
pub fn locate(exe: Option<&Path>, path: Option<&OsStr>) -> Option<PathBuf> {
    let beside = exe
        .and_then(Path::parent)
        .map(|dir| dir.join(BENCH_BIN))
        .filter(|p| p.is_file());
    beside.or_else(|| {
        std::env::split_paths(path?)
            .map(|dir| dir.join(BENCH_BIN))
            .find(|p| p.is_file())
    })
}

/// Replaces this process with `agentd-bench <args>` (exit 2 naming what to build when absent).
pub fn exec(cli: &Cli, args: &BenchArgs) -> ExitCode {
    let exe = std::env::current_exe().ok();
    let Some(bin) = locate(exe.as_deref(), std::env::var_os("PATH").as_deref()) else {
        eprintln!(
            "agentd: `agentd bench` runs the `{BENCH_BIN}` binary, which is not installed beside {} \
             nor on PATH: build it with `cargo build -p {BENCH_BIN}` (add `--release` for figures \
             worth quoting)",
            exe.as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "this executable".into())
        );
        return ExitCode::from(2);
    };
    let mut cmd = std::process::Command::new(&bin);
    if let Some(c) = &cli.config {
        cmd.arg("--config").arg(c);
    }
    if let Some(f) = &cli.log_format {
        cmd.arg("--log-format").arg(f);
    }
    cmd.args(&args.args);
    use std::os::unix::process::CommandExt;
    let err = cmd.exec();
    eprintln!("agentd: cannot run {}: {err}", bin.display());
    ExitCode::from(1)
}
