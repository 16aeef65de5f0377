//! The `agentd` binary: parse the command line, run, map errors to exit codes
//! (0 ok, 1 runtime failure, 2 bad input).

fn main() -> std::process::ExitCode {
    agentd::cli::main()
}
