//! `agentd eval`: auto-create over the labelled samples (`samples/eval/`), scored per document
//! (see `crate::eval`). Prints figures; with `--baseline FILE` it also fails (exit 1) when
//! recall, precision or value accuracy fell below a stored run's.

use super::bad;
use super::output::print_json;
use crate::app::App;
use crate::config::ProviderChoice;
use crate::eval::labels::Split;
use crate::eval::{self, EvalOptions, baseline, labels};
use crate::kinds::{self, JobKind};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Options of `agentd eval`.
#[derive(Args, Debug)]
pub struct EvalCmd {
    /// The provider: offline, openai or anthropic (default: as configured, llm.provider).
    #[arg(long)]
    pub provider: Option<String>,
    /// OpenAI-compatible base URL, e.g. http://127.0.0.1:8089/v1 (implies --provider openai
    /// unless given). Takes --api-key: the configured keys are never sent to a URL given here.
    #[arg(long)]
    pub base_url: Option<String>,
    /// The key sent to --base-url, and only there (a server that takes none takes any, e.g.
    /// `none`); required with --base-url, so that the configured llm.api_key or OPENAI_API_KEY
    /// never goes to a URL typed on the command line (review D17).
    #[arg(long, env = "AGENTD_EVAL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The model (overrides llm.model and the job file's).
    #[arg(long)]
    pub model: Option<String>,
    /// The labelled samples: <name>.txt and <name>.labels.toml.
    #[arg(long, default_value = "samples/eval")]
    pub dir: PathBuf,
    /// Only these samples (comma-separated names, e.g. invoice_en,receipt_ocr).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Which part of the set: dev (may be tuned on), test (never tuned on) or all.
    #[arg(long, default_value = "all")]
    pub split: String,
    /// Store this run's report (the `--json` report) in FILE, to serve as a baseline.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Compare with a run stored by `--save`: exit 1 naming the metric and split when field
    /// recall, field precision or value accuracy fell by more than the tolerance.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// How far (absolute share: 0.02 is two points) a metric may fall below the baseline.
    #[arg(long, default_value_t = 0.02)]
    pub tolerance: f64,
    /// Guided mode: each round offers only the tools of the next unmet goal (`llm.guided = on`).
    #[arg(long)]
    pub guided: bool,
    /// Constrained calls: rounds that require a call also send a response_format only a call
    /// satisfies (`llm.constrained_calls = true`; for llama.cpp, vLLM, Ollama).
    #[arg(long)]
    pub constrained: bool,
    /// Measure schema reuse instead of scoring: upload the samples one after another, kind by
    /// kind, into one new org with `agent.reuse_schemas` on, and report how often a document
    /// reused its kind's schema. Without it the eval runs with reuse off, so every document's
    /// proposal is its own and the scores do not depend on the order runs finish in.
    #[arg(long)]
    pub reuse: bool,
    /// With --reuse: every kind into one org (kind after kind), so a schema may also be reused
    /// for another kind; without it each kind gets an org of its own.
    #[arg(long, requires = "reuse")]
    pub mixed: bool,
    /// auto_create worker concurrency (default: the job file's).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Stop waiting when no document has finished for this many seconds (with `--reuse`: for
    /// one upload; for the nightly review: its job); unfinished documents are reported
    /// `timeout`.
    #[arg(long, default_value_t = 1800)]
    pub timeout_secs: u64,
    /// Org name for the documents (default: a new `eval-<time>` org).
    #[arg(long)]
    pub org: Option<String>,
    /// Skip the nightly review of the eval's org that follows its auto-creates (the org's
    /// first tag made, its `proactive_suggestion` job run with the same provider, its
    /// suggestions counted and checked against the org's overview).
    #[arg(long)]
    pub no_nightly: bool,
    /// Also write the report as one self-contained page (inline SVG charts of the scores per
    /// kind and language, tokens per proposal, the baseline beside this run, every document),
    /// even when the run falls below its baseline.
    #[arg(long, conflicts_with = "reuse")]
    pub html: Option<PathBuf>,
    /// Do not run: read a report stored by `--save` and print, compare (`--baseline`) or draw
    /// (`--html`) it as for a run.
    #[arg(long, conflicts_with_all = ["reuse", "provider", "base_url", "model", "only", "guided", "constrained", "org", "concurrency", "save"])]
    pub report: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The App the eval runs on: `app` with the provider, base URL and model of the flags, and no
/// HTTP server.
fn eval_app(app: &App, cmd: &EvalCmd) -> anyhow::Result<App> {
    let mut config = (*app.config).clone();
    config.http.addr = String::new();
    if let Some(p) = &cmd.provider {
        if !["offline", "openai", "anthropic"].contains(&p.as_str()) {
            return Err(bad(format!(
                "--provider must be offline, openai or anthropic (got {p:?})"
            )));
        }
        config.llm.provider = ProviderChoice::try_from(p.clone()).map_err(bad)?;
        if config.llm.provider == ProviderChoice::Anthropic
            && cmd.model.is_none()
            && config.llm.model == crate::config::DEFAULT_MODEL
        {
            config.llm.model = crate::config::ANTHROPIC_DEFAULT_MODEL.to_string();
        }
    } else if cmd.base_url.is_some() {
        config.llm.provider = ProviderChoice::OpenAi;
    }
    match (&cmd.base_url, &cmd.api_key) {
        (Some(u), Some(key)) if !key.trim().is_empty() => {
            // That URL with that key only: not the configured entries and their keys.
            config.llm.base_url = u.clone();
            config.llm.api_key = key.clone();
            config.llm.providers.clear();
            config.llm.fallback.clear();
        }
        (Some(_), _) => {
            return Err(bad(
                "--base-url takes --api-key (or AGENTD_EVAL_API_KEY): the configured key \
                 (llm.api_key, OPENAI_API_KEY) is not sent to a URL given on the command line; \
                 a server that takes no key takes any, e.g. --api-key none",
            ));
        }
        // Without --base-url the configured provider keeps its configured key.
        (None, _) => {}
    }
    let mut catalog = (*app.catalog).clone();
    if let Some(m) = &cmd.model {
        if m.trim().is_empty() {
            return Err(bad("--model must not be empty"));
        }
        config.llm.model = m.clone();
        for spec in catalog.kinds.values_mut() {
            spec.agent.model = String::new();
        }
    }
    if let Some(spec) = catalog.kinds.get_mut(kinds::AutoCreate::NAME) {
        spec.agent.reuse_schemas = cmd.reuse;
    }
    if cmd.guided {
        // Every kind offers only the tools of its next unmet goal (see `agent::settings`).
        config.llm.guided = "on".into();
    }
    if cmd.constrained {
        config.llm.constrained_calls = crate::config::Constrained::On;
    }
    super::log_providers(&config.llm);
    Ok(App {
        provider: crate::llm::from_config(&config.llm),
        config: Arc::new(config),
        catalog: Arc::new(catalog),
        ..app.clone()
    })
}

/// Runs `agentd eval`.
pub async fn run(app: &App, cmd: EvalCmd) -> anyhow::Result<()> {
    if cmd.concurrency == Some(0) {
        return Err(bad("--concurrency must be ≥ 1"));
    }
    let split = match cmd.split.as_str() {
        "all" => None,
        "dev" => Some(Split::Dev),
        "test" => Some(Split::Test),
        other => {
            return Err(bad(format!(
                "--split must be dev, test or all (got {other:?})"
            )));
        }
    };
    if !(0.0..=1.0).contains(&cmd.tolerance) {
        return Err(bad(format!(
            "--tolerance must be a share between 0 and 1, e.g. 0.02 for two points (got {})",
            cmd.tolerance
        )));
    }
    if let Some(path) = &cmd.report {
        let report = stored_report(path)?;
        let base = match &cmd.baseline {
            Some(path) => Some(baseline::load(path).map_err(|e| bad(e.to_string()))?),
            None => None,
        };
        return conclude(&cmd, &report, base);
    }
    let samples = labels::load_dir(&cmd.dir, &cmd.only, split).map_err(|e| bad(e.to_string()))?;
    // Read before the run: a bad file is the caller's to fix, not found out after an hour.
    let base = match &cmd.baseline {
        Some(path) => Some(baseline::load(path).map_err(|e| bad(e.to_string()))?),
        None => None,
    };
    let eapp = eval_app(app, &cmd)?;
    let org_name = cmd
        .org
        .clone()
        .unwrap_or_else(|| format!("eval-{}", app.clock.now().format("%Y%m%dT%H%M%S%.3f")));
    // The eval's worker runs every waiting auto_create job of its org: an org that exists
    // already (someone's documents) is not the eval's to run.
    if crate::store::orgs::find(&app.pool, &org_name)
        .await?
        .is_some()
    {
        return Err(bad(format!(
            "--org {org_name}: an org of that name exists already; the eval creates its own org \
             (its worker would run that org's waiting jobs): pick a new name or leave --org out"
        )));
    }
    let eval_org = org_name.clone();
    let outcome: anyhow::Result<()> = async {
        if cmd.reuse {
            if cmd.baseline.is_some() {
                return Err(bad("--reuse measures schema reuse; it takes no --baseline"));
            }
            eprintln!(
                "agentd eval --reuse: {} samples from {} one after another, provider {}, org {}",
                samples.len(),
                cmd.dir.display(),
                eapp.provider.name(),
                org_name
            );
            let timeout = Duration::from_secs(cmd.timeout_secs);
            let report = eval::reuse::run(
                &eapp,
                &samples,
                &org_name,
                cmd.mixed,
                timeout,
                |done, total| {
                    eprint!("\r  {done}/{total} uploads done");
                    let _ = std::io::stderr().flush();
                },
            )
            .await?;
            eprintln!();
            match cmd.json {
                true => print_json(&report)?,
                false => print!("{}", eval::reuse::render(&report)),
            }
            if let Some(path) = &cmd.save {
                let text = serde_json::to_string_pretty(&report)?;
                std::fs::write(path, text + "\n")
                    .map_err(|e| anyhow::anyhow!("--save {}: cannot write: {e}", path.display()))?;
            }
            return Ok(());
        }
        let opts = EvalOptions {
            org_name,
            concurrency: cmd.concurrency,
            timeout: Duration::from_secs(cmd.timeout_secs),
            // `job`: the job file decides (auto_create is guided by default).
            guided: eapp.config.llm.guided == "on"
                || (eapp.config.llm.guided == "job"
                    && eapp.spec(kinds::AutoCreate::NAME).agent.guided),
            constrained: eapp.config.llm.constrained_calls == crate::config::Constrained::On,
            nightly: !cmd.no_nightly,
        };
        eprintln!(
            "agentd eval: {} samples from {}, provider {}, org {}",
            samples.len(),
            cmd.dir.display(),
            eapp.provider.name(),
            opts.org_name
        );
        let report = eval::run(&eapp, &samples, &opts, |done, total| {
            eprint!("\r  {done}/{total} documents done");
            let _ = std::io::stderr().flush();
        })
        .await?;
        eprintln!();
        conclude(&cmd, &report, base)
    }
    .await;
    // The eval's org stays for reading its documents and runs, but inactive: the nightly cron
    // would otherwise review it every night on the configured provider (review D17).
    match crate::store::orgs::find(&app.pool, &eval_org).await {
        Ok(Some(org)) => {
            if let Err(e) = crate::store::orgs::set_active(&app.pool, org.id, false).await {
                eprintln!("agentd eval: could not deactivate org {eval_org}: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("agentd eval: could not deactivate org {eval_org}: {e}"),
    }
    outcome
}

/// What follows a report, run or read (`--report`): the table or JSON, `--save`, `--html`, and
/// the comparison with `--baseline` (exit 1 naming each metric that fell).
fn conclude(
    cmd: &EvalCmd,
    report: &eval::EvalReport,
    base: Option<baseline::Baseline>,
) -> anyhow::Result<()> {
    if cmd.json {
        print_json(report)?;
    } else {
        print!("{}", eval::render_table(report));
    }
    if let Some(path) = &cmd.save {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| anyhow::anyhow!("--save {}: cannot write: {e}", path.display()))?;
        eprintln!("agentd eval: report saved to {}", path.display());
    }
    if let Some(path) = &cmd.html {
        let against = match (&base, &cmd.baseline) {
            (Some(b), Some(file)) => Some((file.display().to_string(), b)),
            _ => None,
        };
        let page = eval::html::render(report, against.as_ref().map(|(f, b)| (f.as_str(), *b)));
        std::fs::write(path, page)
            .map_err(|e| anyhow::anyhow!("--html {}: cannot write: {e}", path.display()))?;
        eprintln!("agentd eval: page written to {}", path.display());
    }
    let (Some(base), Some(path)) = (base, &cmd.baseline) else {
        return Ok(());
    };
    let cmp = baseline::compare(&base, report, cmd.tolerance)
        .map_err(|e| anyhow::anyhow!("--baseline {}: {e}", path.display()))?;
    for s in &cmp.skipped {
        eprintln!("agentd eval: baseline: not compared: {s}");
    }
    for line in baseline::work_against(&base, report, &cmp.compared) {
        eprintln!("agentd eval: against the baseline, {line}");
    }
    if !cmp.regressions.is_empty() {
        let list: Vec<String> = cmp.regressions.iter().map(|r| r.to_string()).collect();
        anyhow::bail!(
            "eval regression against {} (provider {}; tolerance {:.1} points): {}",
            path.display(),
            base.provider,
            100.0 * cmd.tolerance,
            list.join("; ")
        );
    }
    eprintln!(
        "agentd eval: no regression against {} (split {}; tolerance {:.1} points)",
        path.display(),
        cmp.compared.join(", "),
        100.0 * cmd.tolerance
    );
    Ok(())
}

/// `agentd eval --report FILE`: a stored report, read instead of a run.
fn stored_report(path: &std::path::Path) -> anyhow::Result<eval::EvalReport> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(format!("--report {}: cannot read: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        bad(format!(
            "--report {}: not a report stored by --save: {e}",
            path.display()
        ))
    })
}
