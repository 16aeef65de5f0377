//! The `agentd` binary: parse the command line, run, map errors to exit codes
//! (0 ok, 1 runtime failure, 2 bad input).

fn main() -> std::process::ExitCode {
    // A panic's message may quote what it choked on — a document's text, a model's arguments,
    // personal data — so the log gets where it happened, not what it said (catch_unwind in the
    // tool registry and the job runtime turn the panic itself into an error).
    // `AGENTD_PANIC_MESSAGES=1` (a developer's machine) keeps the default report.
    if std::env::var_os("AGENTD_PANIC_MESSAGES").is_none_or(|v| v != "1") {
        std::panic::set_hook(Box::new(|info| {
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            tracing::error!(
                at,
                "panic (its message is withheld from the log: it may quote input; AGENTD_PANIC_MESSAGES=1 shows it)"
            );
            eprintln!("agentd: panic at {at} (message withheld; AGENTD_PANIC_MESSAGES=1 shows it)");
        }));
    }
    agentd::cli::main()
}
