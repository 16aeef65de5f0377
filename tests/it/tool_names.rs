//! A tool is declared in one place (issue 34): no string literal outside `crates/agentd-agent/src/tools` is the name
//! of a registered tool. Code elsewhere names a tool by its type's constant
//! (`tools::schemas::CreateSchema::NAME`) or asks the registry; names are read from the
//! registry, the job files and model output. The one exception is the offline model's list of
//! the tools it calls ([`OFFLINE_NAMES`]): it plays a model, writing model output, and sits below
//! `tools` in the module layers; each of its names must be a registered tool. No database.

use crate::source_scan;
use source_scan::{string_literals, workspace_rust_files};
use std::path::Path;

/// The offline model's tool names (`llm::offline::names`), the one file outside `crates/agentd-agent/src/tools`
/// that writes them.
const OFFLINE_NAMES: &str = "crates/agentd-llm/src/offline/names.rs";

/// `file:line: "name"` for every literal in the files under `src/` outside `crates/agentd-agent/src/tools` (and
/// [`OFFLINE_NAMES`]) that is the name of a tool of `names`.
fn literals_outside_tools(root: &Path, names: &[&str]) -> Vec<String> {
    let files = workspace_rust_files(root);
    let tools = root.join("crates/agentd-agent/src/tools");
    let mut found = Vec::new();
    let offline = root.join(OFFLINE_NAMES);
    for f in files
        .iter()
        .filter(|f| !f.starts_with(&tools) && **f != offline)
    {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for (line, lit) in string_literals(&text) {
            if names.contains(&lit.as_str()) {
                let rel = f.strip_prefix(root).unwrap_or(f);
                found.push(format!("{}:{line}: \"{lit}\"", rel.display()));
            }
        }
    }
    found
}

#[test]
fn no_tool_name_is_a_string_outside_src_tools() {
    let registry = agentd::tools::builtin_registry();
    let names = registry.names();
    assert!(names.len() >= 20, "the registry lists the tools: {names:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = literals_outside_tools(root, &names);
    assert!(
        found.is_empty(),
        "tool names written as strings outside crates/agentd-agent/src/tools (use the tool type's NAME, e.g. \
         tools::schemas::CreateSchema::NAME, or ask the registry):\n{}",
        found.join("\n")
    );
}

/// The offline model calls tools by the names the registry gives them: a renamed tool fails here,
/// not silently in the offline eval.
#[test]
fn the_offline_model_names_registered_tools() {
    let registry = agentd::tools::builtin_registry();
    let unknown: Vec<&str> = agentd::llm::offline::names::ALL
        .iter()
        .copied()
        .filter(|n| registry.get(n).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "the offline model calls unknown tools: {unknown:?}"
    );
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(OFFLINE_NAMES)
            .is_file()
    );
}
