//! The OpenAPI document as a client generator reads it: every operation has a unique
//! operationId and a tag, every parameter is declared where the server reads it (no query
//! parameter in the path), every error answer is a problem detail, every answer is typed; and
//! Schemathesis (`--checks all`, every phase including the stateful one) against a real
//! `agentd serve` process with a key finds nothing. Without Schemathesis the test fails and
//! says how to install it (`scripts/test` installs it).

use crate::api_support;
use crate::common;
use agentd::api::Role;
use api_support::Api;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Every operation of the document: (method, path, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for m in METHODS {
            if let Some(op) = item.get(m) {
                out.push((m.to_string(), path.clone(), op.clone()));
            }
        }
    }
    out
}

/// The schema `s` points to (following one `$ref`).
fn resolve<'a>(doc: &'a Value, s: &'a Value) -> &'a Value {
    match s["$ref"].as_str() {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap_or_default();
            &doc["components"]["schemas"][name]
        }
        None => s,
    }
}

#[tokio::test]
async fn the_document_names_each_operation_once_and_each_parameter_where_it_is_read() {
    let api = Api::start().await;
    let (_, key) = api.org("a", Role::Reader).await;
    let doc = api.call("GET", "/v1/openapi.json", None, None).await.body;
    let ops = operations(&doc);
    assert!(ops.len() >= 27, "{} operations", ops.len());

    let mut ids: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (m, path, op) in &ops {
        let what = format!("{} {path}", m.to_uppercase());
        let id = op["operationId"].as_str().unwrap_or_default();
        assert!(
            id.len() > 4 && id.chars().next().is_some_and(|c| c.is_ascii_lowercase()),
            "{what}: operationId {id:?} is not a meaningful camelCase name"
        );
        ids.entry(id.to_string()).or_default().push(what.clone());
        assert!(
            op["tags"].as_array().is_some_and(|t| !t.is_empty()),
            "{what}: no tag"
        );

        // Parameters: a path parameter is a `{name}` of the path, and every `{name}` is one;
        // the list parameters are read from the query string.
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        let mut in_path = BTreeSet::new();
        for p in &params {
            let (name, place) = (p["name"].as_str().unwrap(), p["in"].as_str().unwrap());
            match place {
                "path" => {
                    assert!(
                        path.contains(&format!("{{{name}}}")),
                        "{what}: {name} is declared in the path but the path has no {{{name}}}"
                    );
                    in_path.insert(name.to_string());
                }
                "query" => assert_ne!(p["required"], true, "{what}: query {name} is optional"),
                // Sent or not, never null (a generated client would send `None`).
                "header" => assert!(
                    !p["schema"]["type"]
                        .as_array()
                        .is_some_and(|t| t.contains(&"null".into())),
                    "{what}: header {name} is typed nullable"
                ),
                other => panic!("{what}: {name} in {other}"),
            }
            // The list filters are query parameters (a `{kind}` of the path is the kind acted on).
            if ["limit", "cursor", "status", "kind", "after"].contains(&name)
                && !path.contains(&format!("{{{name}}}"))
            {
                assert_eq!(place, "query", "{what}: {name} is a query parameter");
            }
        }
        for seg in path.split('/').filter(|s| s.starts_with('{')) {
            let name = seg.trim_matches(['{', '}']);
            assert!(in_path.contains(name), "{what}: {{{name}}} is not declared");
        }

        // A body is absent or an object: `null` is no body a generator should offer.
        for (_, c) in op["requestBody"]["content"]
            .as_object()
            .into_iter()
            .flatten()
        {
            assert!(
                c["schema"].get("oneOf").is_none(),
                "{what}: a body may be null"
            );
        }

        // Answers: the shared problems, each with the problem+json body; success answers typed.
        let responses = op["responses"].as_object().expect("responses");
        for status in ["400", "401"] {
            assert!(responses.contains_key(status), "{what}: no {status}");
        }
        if path.contains("{id}") {
            assert!(responses.contains_key("404"), "{what}: no 404");
        }
        if op.get("requestBody").is_some() {
            for status in ["413", "415", "422"] {
                assert!(responses.contains_key(status), "{what}: no {status}");
            }
        }
        for (status, r) in responses {
            if status.starts_with('4') {
                assert_eq!(
                    r["content"]["application/problem+json"]["schema"]["$ref"],
                    "#/components/schemas/Problem",
                    "{what} {status}: not a problem detail"
                );
                assert!(
                    r["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{what} {status}: no description"
                );
            } else if let Some(s) = r["content"]["application/json"].get("schema") {
                let s = resolve(&doc, s);
                let typed = s.get("properties").is_some()
                    || s.get("allOf").is_some()
                    || s.get("oneOf").is_some();
                assert!(typed, "{what} {status}: a bare answer schema: {s}");
            }
        }
    }
    // Client generators make one type per schema: a page refers to its item's schema (not a
    // copy), and an enum whose values a generator would map to one constant name (`GMT+0`,
    // `GMT0`) names each constant (`x-enum-varnames`, one distinct name per value).
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for (name, s) in schemas.iter().filter(|(n, _)| n.starts_with("Paged_")) {
        let item = format!("#/components/schemas/{}", &name["Paged_".len()..]);
        assert_eq!(
            s["properties"]["items"]["items"]["$ref"],
            item.as_str(),
            "{name}"
        );
    }
    let tz = &schemas["Timezone"];
    let (values, names) = (
        tz["enum"].as_array().unwrap(),
        tz["x-enum-varnames"].as_array().unwrap(),
    );
    assert!(values.contains(&"Europe/Berlin".into()) && values.len() == names.len());
    let distinct: BTreeSet<&str> = names.iter().map(|n| n.as_str().unwrap()).collect();
    assert_eq!(distinct.len(), names.len(), "x-enum-varnames repeat a name");
    assert_eq!(
        doc["components"]["schemas"]["SettingsPatch"]["properties"]["timezone"]["oneOf"][1]["$ref"],
        "#/components/schemas/Timezone"
    );

    let dup: Vec<_> = ids.iter().filter(|(_, w)| w.len() > 1).collect();
    assert!(dup.is_empty(), "operationIds used twice: {dup:?}");
    for id in [
        "listDocuments",
        "approveApproval",
        "createDocument",
        "listEvents",
    ] {
        assert!(ids.contains_key(id), "no operation {id}");
    }

    // What a list route reads is what the document says: a query parameter is honoured and a
    // state outside the documented enum is refused naming it.
    let list = &doc["paths"]["/v1/approvals"]["get"]["parameters"];
    let status = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "status")
        .unwrap();
    let states: Vec<&str> = status["schema"]["enum"]
        .as_array()
        .expect("status is an enum")
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(
        states.contains(&"pending") && states.contains(&"stale"),
        "{states:?}"
    );
    let k = Some(key.as_str());
    let ok = api
        .call("GET", "/v1/approvals?status=pending&limit=1", k, None)
        .await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    api.call("GET", "/v1/approvals?status=later", k, None)
        .await
        .problem(400, Some("status"));
}

/// Schemathesis' CLI: `AGENTD_TEST_SCHEMATHESIS`, the virtualenv `scripts/test` makes, or
/// `schemathesis` on PATH; else a panic with the install line.
fn schemathesis() -> PathBuf {
    if let Some(p) = std::env::var_os("AGENTD_TEST_SCHEMATHESIS") {
        return p.into();
    }
    let tools = std::env::var_os("AGENTD_TOOLS_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/agentd/tools")));
    let mut candidates: Vec<PathBuf> = tools
        .map(|t| t.join("venv/bin/schemathesis"))
        .into_iter()
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("schemathesis")));
    }
    candidates.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!(
            "the OpenAPI conformance test needs Schemathesis (PyPI). Install it with \
             `python3 -m venv ~/.cache/agentd/tools/venv && ~/.cache/agentd/tools/venv/bin/pip install schemathesis` \
             (scripts/test does this when it is missing), or point AGENTD_TEST_SCHEMATHESIS at its CLI."
        )
    })
}

/// A child process killed when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_against_agentd_serve() {
    use std::io::{BufRead, BufReader};
    let st = schemathesis();
    let db = common::TestDb::new().await;
    let agentd = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_agentd"))
            .args(args)
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    // Data of every kind to read: documents with proposals, suggestions, approvals (pending,
    // stale, expired, executed), runs, jobs and events — the demo's org.
    agentd(&["demo", "--org", "demo"]);
    let key: Value = serde_json::from_str(&agentd(&[
        "keys", "create", "--org", "demo", "--role", "admin", "--json",
    ]))
    .unwrap();
    let key = key["key"].as_str().unwrap().to_string();

    let mut serve = Killed(
        Command::new(env!("CARGO_BIN_EXE_agentd"))
            .args(["serve", "--addr", "127.0.0.1:0"])
            .env("DATABASE_URL", &db.url)
            .env("AGENTD_HTTP__ADDR", "")
            // Schemathesis sends thousands of requests a minute with one key: the rate limits
            // (tested in api.rs) would answer most of them 429.
            .env("AGENTD_API__REQUESTS_PER_MINUTE_PER_KEY", "0")
            .env("AGENTD_API__REQUESTS_PER_MINUTE_PER_ORG", "0")
            .env("AGENTD_API__RUNS_PER_MINUTE_PER_KEY", "0")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stderr = serve.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("serve prints its address");

    let report = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schemathesis");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis.toml");
    let out = Command::new(&st)
        .args(["--config-file", config, "run"])
        .arg(format!("http://{addr}/v1/openapi.json"))
        .args(["--checks", "all"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--header", &format!("Authorization: Bearer {key}")])
        // An event stream never ends its answer (tests/it/webhooks.rs reads it with resume).
        .args(["--exclude-operation-id", "streamEvents"])
        // One worker: Hypothesis' lambda introspection is not thread-safe (a runtime error, seen).
        .args(["--max-examples", "40", "--seed", "7", "--workers", "1"])
        .args(["--request-timeout", "20"])
        .arg("--report-dir")
        .arg(&report)
        .args(["--report", "junit"])
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_HOOKS", "")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", st.display()));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(serve);
    assert!(
        out.status.success(),
        "Schemathesis found failures (report: {}):\n{text}",
        report.display()
    );
    // It ran: every operation but the stream was tested.
    // Word by word: "40 passed" is not "0 passed" (a substring test failed runs that passed).
    let counts: Vec<&str> = text
        .lines()
        .flat_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let passed: Vec<&str> = words
                .windows(2)
                .filter(|w| w[1] == "passed")
                .map(|w| w[0])
                .collect();
            passed
        })
        .collect();
    assert!(
        !counts.is_empty() && !counts.contains(&"0"),
        "Schemathesis tested nothing:\n{text}"
    );
}

/// Issue 49: the document lists every event type (the webhook subscription's `events` and the
/// event's `type` are that enum) and the `subject` filter of both event routes, as a UUID.
#[tokio::test]
async fn the_document_lists_the_run_events_and_the_subject_filter() {
    let api = Api::start().await;
    let doc = api.call("GET", "/v1/openapi.json", None, None).await.body;
    let types: BTreeSet<&str> = doc["components"]["schemas"]["EventType"]["enum"]
        .as_array()
        .expect("EventType is an enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let all: BTreeSet<&str> = agentd::store::events::EventType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    assert_eq!(types, all);
    for t in [
        "run.started",
        "run.step",
        "run.finished",
        "extraction.flagged",
        "job.dead",
        "suggestion.dismissed",
    ] {
        assert!(types.contains(t), "{t} not in {types:?}");
    }
    for path in ["/v1/events", "/v1/events/stream"] {
        let params = doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{path} has parameters"));
        let subject = params
            .iter()
            .find(|p| p["name"] == "subject")
            .unwrap_or_else(|| panic!("{path} has no subject parameter"));
        assert_eq!(subject["in"], "query", "{path}");
        let schema = resolve(&doc, &subject["schema"]);
        assert_eq!(schema["format"], "uuid", "{path}: {subject}");
    }
}
