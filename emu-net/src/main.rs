//! `uet-emu`: front-end of the software UET fabric.

use std::process::ExitCode;

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("--version") | Some("-V") => {
            println!("uet-emu {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "uet-emu {}: the switch model and its relay are not built yet.\n\
                 usage: uet-emu --version",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::from(2)
        }
    }
}
