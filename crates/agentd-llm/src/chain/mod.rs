//! Several providers behind one [`LlmProvider`]: the `[[llm.providers]]` entries in fallback
//! order (`llm.fallback`). A call goes to the entries that serve its model (an entry's `models`,
//! empty: any), in that order: the first that answers answers. The next entry is tried only
//! when one fails in a way another endpoint may not — a timeout, a 5xx, an overload, a 429
//! past its wait, a refused connection (a retryable [`LlmError`] that is not the model's own
//! output failing to parse) — and each such failure counts against the entry's circuit breaker
//! ([`breaker`]); an entry whose breaker is open is skipped until its probe. Anything else
//! (a 400, a refused key) is the call's answer: another endpoint would refuse it too, or the
//! error is the org's to fix.
//!
//! A chain scoped to one org and run ([`LlmProvider::scoped`], see `llm::org_keys`) records
//! every attempt in `provider_calls` with the entry and the model that answered or failed, and
//! calls with the org's own key where it stored one: that entry then has a breaker of its own
//! per org, so one org's bad key or exhausted quota never opens the fleet's breaker. Such a
//! chain keeps only the entry the key is for (review D2): when it fails or is open the call
//! fails retryably, and a model it does not serve is refused — the org's text never goes to
//! the operator's entries on the operator's keys, unless the org opted in
//! (`byok_fallback = operator`: the whole chain, its own entry in its place).

pub mod breaker;
mod build;

use super::org_keys::{ByokFallback, CallScope, OrgKey};
use super::{CompletionRequest, CompletionResponse, LlmError, LlmProvider, SharedProvider};
use crate::clock::SharedClock;
use crate::config::{LlmConfig, ProviderKind};
use crate::store::provider_calls::Attempt;
use breaker::{Admit, Breaker};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::warn;
use uuid::Uuid;

/// One entry with its provider and breaker.
struct Entry {
    name: String,
    kind: ProviderKind,
    /// The models it serves (empty: any).
    models: Vec<String>,
    provider: SharedProvider,
    breaker: Arc<Breaker>,
    /// Calls carry the org's own key (its breaker is the org's).
    org_key: bool,
}

impl Entry {
    fn serves(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }
}

/// What scoped copies of a chain share with the fleet's chain.
struct Shared {
    llm: LlmConfig,
    clock: SharedClock,
    /// Breakers of entries called with an org's key, per (entry, org).
    org_breakers: Mutex<HashMap<(String, Uuid), Arc<Breaker>>>,
}

/// The chain of provider entries (see the module docs).
pub struct ProviderChain {
    entries: Vec<Arc<Entry>>,
    shared: Arc<Shared>,
    /// Set on a chain made for one org's calls: where attempts are recorded.
    scope: Option<(sqlx::PgPool, Uuid, Option<Uuid>)>,
    /// Set on a chain of one org's key without fallback: the entry the key is for, the only
    /// one left (named in the errors).
    confined: Option<String>,
}

/// The chain the config describes (`llm.providers` in `llm.fallback` order, or the one entry of
/// the single-endpoint keys). `pool` keeps the entries' fleet-wide limits; `clock` times the
/// breakers.
pub fn from_config(
    llm: &LlmConfig,
    pool: Option<&sqlx::PgPool>,
    clock: SharedClock,
) -> ProviderChain {
    let entries = llm
        .ordered_entries()
        .iter()
        .map(|e| {
            let key = e.key(crate::config::env_var);
            Arc::new(Entry {
                name: e.name.clone(),
                kind: e.kind,
                models: e.models.clone(),
                provider: build::build(e, &key, llm, pool),
                breaker: Arc::new(breaker_of(llm)),
                org_key: false,
            })
        })
        .collect();
    ProviderChain {
        entries,
        shared: Arc::new(Shared {
            llm: llm.clone(),
            clock,
            org_breakers: Mutex::default(),
        }),
        scope: None,
        confined: None,
    }
}

/// An entry's breaker: its probe is presumed lost after the longest one call may take (every
/// attempt of the request timeout, and a cool-down's worth for the waits between them).
fn breaker_of(llm: &LlmConfig) -> Breaker {
    let attempts = u64::from(llm.max_retries).saturating_add(1);
    let probe_deadline = llm
        .request_timeout_secs
        .saturating_mul(attempts)
        .saturating_add(llm.breaker_cooldown_secs);
    Breaker::new(
        llm.breaker_failures,
        std::time::Duration::from_secs(llm.breaker_cooldown_secs),
        std::time::Duration::from_secs(probe_deadline),
    )
}

/// Whether `e` is the endpoint's failure: the next entry is tried and the breaker counts it.
/// A model output the server could not parse is the model's (the loop retries it with a hint,
/// and it was charged); a limiter that could not reach the database is ours.
fn falls_back(e: &LlmError) -> bool {
    e.retryable && !e.after_generation() && !e.message.contains(super::limits::LIMITER_UNREACHABLE)
}

/// `agentd_provider_breaker_state{provider}` for the fleet's breaker of `e` (0 closed, 1
/// half-open, 2 open); an org's own breaker is that org's and has no gauge.
fn show_breaker(e: &Entry, now: chrono::DateTime<chrono::Utc>) {
    if !e.org_key {
        metrics::gauge!("agentd_provider_breaker_state", "provider" => e.name.clone())
            .set(e.breaker.shown(now).gauge());
    }
}

impl ProviderChain {
    /// The entry names in the order calls try them.
    pub fn entry_names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// Whether entry `name`'s breaker is open now (status, tests).
    pub fn breaker_open(&self, name: &str) -> bool {
        let now = self.shared.clock.now();
        self.entries
            .iter()
            .any(|e| e.name == name && e.breaker.is_open(now))
    }

    /// The entry an org's key is for: `named`, or the first entry that takes a key.
    fn org_entry(&self, named: Option<&str>) -> Result<usize, String> {
        match named {
            Some(n) => self
                .entries
                .iter()
                .position(|e| e.name == n && e.kind != ProviderKind::Offline)
                .ok_or_else(|| {
                    format!(
                        "the org's provider key is for entry {n:?}, which is not a configured \
                         entry that takes a key (entries: {}); set the key again",
                        self.entry_names().join(", ")
                    )
                }),
            None => self
                .entries
                .iter()
                .position(|e| e.kind != ProviderKind::Offline)
                .ok_or_else(|| {
                    "the org stored a provider key, but no provider entry takes a key".to_string()
                }),
        }
    }

    /// A copy whose entry `i` calls with `key` and the org's own breaker.
    fn with_org_key(&self, i: usize, org: Uuid, key: &OrgKey) -> Vec<Arc<Entry>> {
        let llm = &self.shared.llm;
        let mut entries = self.entries.clone();
        let Some(e) = self.entries.get(i) else {
            return entries;
        };
        let config = llm.ordered_entries().into_iter().find(|c| c.name == e.name);
        if let Some(config) = config {
            let breaker = self
                .shared
                .org_breakers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry((e.name.clone(), org))
                .or_insert_with(|| Arc::new(breaker_of(llm)))
                .clone();
            let own = Arc::new(Entry {
                name: e.name.clone(),
                kind: e.kind,
                models: e.models.clone(),
                provider: build::build(&config, key.expose(), llm, None),
                breaker,
                org_key: true,
            });
            if let Some(slot) = entries.get_mut(i) {
                *slot = own;
            }
        }
        entries
    }

    /// Records one attempt of a scoped chain (nothing for the fleet's chain).
    async fn record(&self, attempt: Attempt<'_>) {
        let Some((pool, org_id, run_id)) = &self.scope else {
            return;
        };
        if let Err(e) = crate::store::provider_calls::record(pool, *org_id, *run_id, &attempt).await
        {
            warn!(error = %e, provider = attempt.provider, "could not record a provider call");
        }
    }
}

/// The record of `e`'s answer: the model the server reported, usage it omitted estimated as
/// the run is charged (`agent::metering`).
fn answered<'a>(
    e: &'a Entry,
    req: &CompletionRequest,
    resp: &CompletionResponse,
    duration: std::time::Duration,
) -> Attempt<'a> {
    let usage = if resp.usage.total() == 0 {
        super::tokens::estimate(req, &resp.message)
    } else {
        resp.usage
    };
    let (input_tokens, output_tokens) = usage.split_i64();
    let model = if resp.model.is_empty() {
        &req.model
    } else {
        &resp.model
    };
    Attempt {
        provider: &e.name,
        org_key: e.org_key,
        model: model.clone(),
        answered: true,
        input_tokens,
        output_tokens,
        duration,
        error: None,
    }
}

/// An entry's error with its name, and for an org's refused key the reason the org can act on.
fn named(e: &Entry, mut err: LlmError) -> LlmError {
    err.provider = e.name.clone();
    if e.org_key && err.is_auth_refusal() {
        err.message = format!(
            "the org's own provider key was refused by provider entry {:?} ({}); set a valid \
             one with PUT /v1/settings/provider-key or `agentd orgs set-key`, or remove it",
            e.name, err.message
        );
    }
    err
}

#[async_trait::async_trait]
impl LlmProvider for ProviderChain {
    /// The first entry's name: what a run records as its provider before any call.
    fn name(&self) -> &str {
        self.entries.first().map_or("none", |e| e.name.as_str())
    }

    /// The endpoint of the entry a call for `model` goes to: the first serving it whose breaker
    /// is not open (else the first serving it), named as that entry.
    fn endpoint(&self, model: &str) -> Option<crate::schema_output::Endpoint<'_>> {
        let now = self.shared.clock.now();
        let serving = || self.entries.iter().filter(|e| e.serves(model));
        let e = serving()
            .find(|e| !e.breaker.is_open(now))
            .or_else(|| serving().next())?;
        let endpoint = e.provider.endpoint(model)?;
        Some(crate::schema_output::Endpoint {
            provider: &e.name,
            ..endpoint
        })
    }

    /// The first entry serving `requested`: what a run records as its model before any call.
    fn model_for<'a>(&'a self, requested: &'a str) -> &'a str {
        self.entries
            .iter()
            .find(|e| e.models.is_empty() || e.models.iter().any(|m| m == requested))
            .map_or(requested, |e| e.provider.model_for(requested))
    }

    fn scopable(&self) -> bool {
        true
    }

    fn breakers(&self, now: chrono::DateTime<chrono::Utc>) -> Vec<breaker::Snapshot> {
        self.entries
            .iter()
            .filter(|e| !e.org_key)
            .map(|e| e.breaker.snapshot(&e.name, now))
            .collect()
    }

    fn scoped(&self, scope: CallScope) -> Result<Option<SharedProvider>, LlmError> {
        let (entries, confined) = match &scope.org_key {
            None => (self.entries.clone(), None),
            Some((key, named)) => {
                let i = self
                    .org_entry(named.as_deref())
                    .map_err(|m| LlmError::new("org-key", m, false))?;
                let mut entries = self.with_org_key(i, scope.org_id, key);
                match scope.byok_fallback {
                    ByokFallback::Operator => (entries, None),
                    ByokFallback::None => {
                        // Only what carries the org's key: no operator's key, no other provider.
                        entries.retain(|e| e.org_key);
                        let own = entries.first().map(|e| e.name.clone());
                        (entries, own)
                    }
                }
            }
        };
        Ok(Some(Arc::new(ProviderChain {
            entries,
            shared: self.shared.clone(),
            scope: Some((scope.pool, scope.org_id, scope.run_id)),
            confined,
        })))
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let candidates: Vec<&Arc<Entry>> = self
            .entries
            .iter()
            .filter(|e| e.serves(&req.model))
            .collect();
        if candidates.is_empty() {
            let message = match &self.confined {
                Some(own) => format!(
                    "the model {:?} is not served by provider entry {own:?}, the entry the \
                     org's own provider key is for (llm.providers[].models); other entries \
                     serve it with the operator's keys, and the org's calls do not fall back to \
                     them (byok_fallback = none): choose a model {own:?} serves, set the key for \
                     another entry, or set byok_fallback = operator",
                    req.model
                ),
                None => format!(
                    "no provider entry serves the model {:?} (llm.providers[].models)",
                    req.model
                ),
            };
            return Err(LlmError::new(self.name(), message, false));
        }
        let mut failures: Vec<String> = Vec::new();
        for e in candidates {
            // A probe's guard lives to the end of this attempt: a call dropped before its
            // outcome (cancelled, its lease lost, its job's timeout) frees the probe's slot.
            let _probe = match Breaker::admit(&e.breaker, self.shared.clock.now()) {
                Admit::No(until) => {
                    show_breaker(e, self.shared.clock.now());
                    failures.push(format!("{}: circuit open until {until}", e.name));
                    continue;
                }
                Admit::Yes => None,
                Admit::Probe(p) => Some(p),
            };
            let started = Instant::now();
            let answer = e.provider.complete(req.clone()).await;
            let elapsed = started.elapsed();
            match answer {
                Ok(resp) => {
                    e.breaker.success(self.shared.clock.now());
                    show_breaker(e, self.shared.clock.now());
                    if !failures.is_empty() {
                        metrics::counter!("agentd_provider_fallbacks_total", "provider" => e.name.clone())
                            .increment(1);
                    }
                    self.record(answered(e, &req, &resp, elapsed)).await;
                    return Ok(resp);
                }
                Err(err) => {
                    let err = named(e, err);
                    self.record(Attempt {
                        provider: &e.name,
                        org_key: e.org_key,
                        model: req.model.clone(),
                        answered: false,
                        input_tokens: 0,
                        output_tokens: 0,
                        duration: elapsed,
                        error: Some(err.message.clone()),
                    })
                    .await;
                    if !falls_back(&err) {
                        e.breaker.neutral();
                        show_breaker(e, self.shared.clock.now());
                        return Err(err);
                    }
                    let opened = e.breaker.failure(self.shared.clock.now());
                    show_breaker(e, self.shared.clock.now());
                    if opened {
                        warn!(provider = %e.name, error = %err, "provider circuit breaker opened");
                        metrics::counter!("agentd_provider_breaker_opened_total", "provider" => e.name.clone())
                            .increment(1);
                    } else {
                        warn!(provider = %e.name, error = %err, "provider failed; trying the next entry");
                    }
                    failures.push(format!("{}: {}", e.name, err.message));
                }
            }
        }
        // Every entry failed or is open: retryable, the job tries again later.
        let confined = match &self.confined {
            Some(own) => format!(
                " (the org's own provider key is for {own:?} only; byok_fallback = none keeps \
                 its calls off the operator's entries)"
            ),
            None => String::new(),
        };
        Err(LlmError::new(
            self.name(),
            format!(
                "no provider entry serving {:?} answered: {}{confined}",
                req.model,
                failures.join("; ")
            ),
            true,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::{FinishReason, Message, Role, ToolChoice, Usage};
    use chrono::Utc;
    use std::collections::VecDeque;

    /// What the endpoint does with the next call.
    enum Next {
        Unavailable,
        /// Never answers: the call waits until its future is dropped.
        Hang,
        Answer,
    }

    /// An endpoint that does, call after call, what it is told.
    struct Endpoint(Mutex<VecDeque<Next>>);

    #[async_trait::async_trait]
    impl LlmProvider for Endpoint {
        fn name(&self) -> &str {
            "endpoint"
        }

        async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
            let next = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
            match next {
                Some(Next::Unavailable) => Err(LlmError::new("endpoint", "503 unavailable", true)),
                Some(Next::Hang) => std::future::pending().await,
                Some(Next::Answer) => Ok(CompletionResponse {
                    message: Message::text(Role::Assistant, "ok"),
                    usage: Usage::default(),
                    finish: FinishReason::EndTurn,
                    model: req.model,
                }),
                None => Err(LlmError::new("endpoint", "no call was expected", false)),
            }
        }
    }

    fn request() -> CompletionRequest {
        CompletionRequest {
            model: "m".into(),
            messages: vec![Message::text(Role::User, "hello")],
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            max_tokens: None,
            response_format: None,
        }
    }

    /// A chain of one entry in front of `script`, its breakers timed by `clock`: opens after 2
    /// failures for 30 s; one call takes at most 60 s × 2 attempts.
    fn chain(script: Vec<Next>, clock: Arc<ManualClock>) -> ProviderChain {
        let mut llm = crate::config::Config::defaults().llm;
        llm.breaker_failures = 2;
        llm.breaker_cooldown_secs = 30;
        llm.request_timeout_secs = 60;
        llm.max_retries = 1;
        ProviderChain {
            entries: vec![Arc::new(Entry {
                name: "primary".into(),
                kind: ProviderKind::OpenAi,
                models: Vec::new(),
                provider: Arc::new(Endpoint(Mutex::new(script.into()))),
                breaker: Arc::new(breaker_of(&llm)),
                org_key: false,
            })],
            shared: Arc::new(Shared {
                llm,
                clock,
                org_breakers: Mutex::default(),
            }),
            scope: None,
            confined: None,
        }
    }

    /// A call dropped before it answers: cancelled, or past its job's timeout.
    async fn dropped(chain: &ProviderChain) {
        let call = chain.complete(request());
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), call)
                .await
                .is_err(),
            "the hanging call answered"
        );
    }

    /// An outage of the endpoint, then what `after` says it does: two failures open the
    /// breaker, a call is then refused without reaching it, and the clock passes the cool-down.
    async fn after_an_outage(after: Vec<Next>) -> (ProviderChain, Arc<ManualClock>) {
        let clock = ManualClock::new(Utc::now());
        let mut script = vec![Next::Unavailable, Next::Unavailable];
        script.extend(after);
        let c = chain(script, clock.clone());
        assert!(c.complete(request()).await.is_err());
        assert!(c.complete(request()).await.is_err());
        assert!(c.breaker_open("primary"));
        let refused = c.complete(request()).await.expect_err("open");
        assert!(refused.message.contains("circuit open"), "{refused}");
        clock.advance(chrono::Duration::seconds(31));
        (c, clock)
    }

    #[tokio::test]
    async fn an_outage_opens_the_breaker_and_dropped_probes_do_not_keep_it_from_recovering() {
        let (c, _clock) =
            after_an_outage(vec![Next::Hang, Next::Hang, Next::Answer, Next::Answer]).await;
        // Past the cool-down, the probe hangs and its call is dropped (cancelled); the next
        // call probes again, and is dropped too (its job's timeout).
        dropped(&c).await;
        dropped(&c).await;
        // The endpoint is back: the next call is the probe, it answers, the breaker closes.
        let answer = c.complete(request()).await.expect("the provider recovered");
        assert_eq!(answer.model, "m");
        assert!(!c.breaker_open("primary"));
        c.complete(request()).await.expect("closed again");
    }

    #[tokio::test]
    async fn a_probe_stuck_past_the_longest_call_is_presumed_lost() {
        let (c, clock) = after_an_outage(vec![Next::Hang, Next::Answer]).await;
        // A probe that never ends and is never dropped (a call nobody awaits or cancels).
        let mut stuck = Box::pin(c.complete(request()));
        assert!(futures::poll!(&mut stuck).is_pending(), "the probe is out");
        let refused = c
            .complete(request())
            .await
            .expect_err("one probe at a time");
        assert!(refused.message.contains("circuit open"), "{refused}");
        // Past the longest one call may take (60 s × 2 attempts + the cool-down), it is lost.
        clock.advance(chrono::Duration::seconds(150));
        c.complete(request()).await.expect("a new probe answers");
        assert!(!c.breaker_open("primary"));
        drop(stuck);
        assert!(
            !c.breaker_open("primary"),
            "the lost probe's guard changes nothing"
        );
    }
}
