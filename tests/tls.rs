//! The OpenAI adapter over HTTPS: one TLS stack (rustls) for the model servers as for
//! PostgreSQL, no OpenSSL.
//!
//! A fake chat-completions server on 127.0.0.1:0 speaks TLS (tokio-rustls) with a certificate for
//! `localhost` signed by a test CA (`tests/fixtures/tls/`: `ca.pem`, `localhost.pem`,
//! `localhost.key`; EC P-256, valid until 2125; regenerate with `openssl req -x509` for the CA and
//! `openssl x509 -req … -extfile` with `subjectAltName=DNS:localhost,IP:127.0.0.1` for the leaf).
//! The adapter verifies certificates against the system's CA store, so:
//! - as is, the test CA is unknown: the call must fail naming the certificate, before any HTTP
//!   request (and so the API key) crosses the connection;
//! - in a child process with `SSL_CERT_FILE=ca.pem` (the variable the platform verifier reads on
//!   Linux) the same server is trusted and a completion comes back. A child process because the
//!   variable is process-wide and this crate forbids `unsafe` (`std::env::set_var`).
//!
//! Also: the lock file holds no OpenSSL or native-tls crate, so neither the build nor the image
//! needs libssl.

use agentd::llm::openai::{OpenAiProvider, OpenAiSettings};
use agentd::llm::{CompletionRequest, LlmProvider, Message, Role, ToolChoice};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

const KEY: &str = "sk-test-TLSKEY-0123456789";

/// Set on the child process of [`https_with_a_trusted_ca_completes`].
const CHILD_ENV: &str = "AGENTD_TLS_TEST_CHILD";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// What the TLS fake observed.
#[derive(Default, Debug)]
struct Observed {
    /// One line per failed handshake (rustls' error, e.g. the client's alert).
    handshake_errors: Vec<String>,
    /// Request heads (request line + headers) that arrived over an established session.
    requests: Vec<String>,
}

/// A TLS server answering every request with `answer` (one HTTP/1.1 exchange per connection).
async fn start_tls_fake(answer: Value) -> (u16, Arc<Mutex<Observed>>) {
    let certs = vec![CertificateDer::from_pem_file(fixture("localhost.pem")).unwrap()];
    let key = PrivateKeyDer::from_pem_file(fixture("localhost.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let observed = Arc::new(Mutex::new(Observed::default()));
    let seen = observed.clone();
    let body = answer.to_string();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, seen, body) = (acceptor.clone(), seen.clone(), body.clone());
            tokio::spawn(async move {
                let mut tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(e) => {
                        seen.lock().unwrap().handshake_errors.push(e.to_string());
                        return;
                    }
                };
                let Some(head) = read_request(&mut tls).await else {
                    return;
                };
                seen.lock().unwrap().requests.push(head);
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, observed)
}

/// Reads one request (head and `content-length` body); returns its head.
async fn read_request<S: AsyncReadExt + Unpin>(stream: &mut S) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buf.len() < end + 4 + length {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Some(head);
    }
}

fn provider(port: u16) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiSettings {
        base_url: format!("https://localhost:{port}/v1"),
        api_key: KEY.into(),
        timeout: Duration::from_secs(20),
        max_retries: 0,
        stream: false,
    })
}

fn ping() -> CompletionRequest {
    CompletionRequest {
        model: "test-model".into(),
        messages: vec![
            Message::text(Role::System, "Answer with one word."),
            Message::text(Role::User, "ping"),
        ],
        tools: vec![],
        tool_choice: ToolChoice::None,
        max_tokens: Some(16),
        response_format: None,
    }
}

fn pong() -> Value {
    json!({
        "id": "chatcmpl-tls",
        "object": "chat.completion",
        "created": 0,
        "model": "test-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": "pong"},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}
    })
}

#[tokio::test]
async fn https_to_an_unknown_ca_fails_naming_the_certificate_before_any_request() {
    let (port, observed) = start_tls_fake(pong()).await;
    let error = provider(port)
        .complete(ping())
        .await
        .expect_err("a certificate from an unknown CA must not be accepted");
    let message = error.to_string();
    assert!(
        message.contains("not trusted") && message.contains("UnknownIssuer"),
        "the error should name the certificate problem: {message}"
    );
    assert!(
        message.contains(&format!("https://localhost:{port}/v1")),
        "the error should name the endpoint: {message}"
    );
    assert!(!message.contains(KEY), "the key leaked: {message}");
    assert!(
        !error.retryable,
        "an untrusted certificate does not fix itself: not retryable ({message})"
    );
    let observed = observed.lock().unwrap();
    assert!(
        !observed.handshake_errors.is_empty(),
        "the client should have refused the handshake: {observed:?}"
    );
    assert!(
        observed.requests.is_empty(),
        "no request (and no key) may cross an unverified connection: {observed:?}"
    );
}

/// Runs only as the child of [`https_with_a_trusted_ca_completes`] (with `SSL_CERT_FILE`).
#[tokio::test]
#[ignore = "run by https_with_a_trusted_ca_completes in a child process with SSL_CERT_FILE"]
async fn child_https_completion_with_ssl_cert_file() {
    assert_eq!(
        std::env::var(CHILD_ENV).as_deref(),
        Ok("1"),
        "run through https_with_a_trusted_ca_completes"
    );
    let (port, observed) = start_tls_fake(pong()).await;
    let response = provider(port).complete(ping()).await.unwrap();
    assert_eq!(response.message.joined_text(), "pong");
    assert_eq!(response.usage.input_tokens, 7);
    assert_eq!(response.usage.output_tokens, 1);
    let observed = observed.lock().unwrap();
    assert!(observed.handshake_errors.is_empty(), "{observed:?}");
    assert_eq!(observed.requests.len(), 1, "{observed:?}");
    let head = &observed.requests[0];
    assert!(
        head.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "{head}"
    );
    assert!(
        head.lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("authorization: Bearer {KEY}"))),
        "the key is sent once the server is verified: {head}"
    );
}

#[test]
fn https_with_a_trusted_ca_completes() {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_https_completion_with_ssl_cert_file",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .env("SSL_CERT_FILE", fixture("ca.pem"))
        .env_remove("SSL_CERT_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{stderr}"
    );
}

#[test]
fn the_lock_file_holds_no_openssl() {
    let lock =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"))
            .unwrap();
    let names: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"'))
        .collect();
    assert!(
        names.contains(&"rustls"),
        "rustls should be in the lock file"
    );
    for banned in [
        "openssl",
        "openssl-sys",
        "native-tls",
        "hyper-tls",
        "tokio-native-tls",
    ] {
        assert!(
            !names.contains(&banned),
            "Cargo.lock holds `{banned}`: a dependency enabled OpenSSL/native-tls again \
             (use the rustls features; see async-openai in Cargo.toml)"
        );
    }
}
