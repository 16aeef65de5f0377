//! The registry: the one chokepoint. Unknown tools and invalid arguments never reach a handler;
//! they come back as errors the model can correct.

use super::{Tool, ToolCtx, ToolError};
use crate::llm::ToolSpec;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every tool, by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
    /// `llm.strict_tools`: offer strict-compatible parameter schemas with `"strict": true`
    /// and read arguments written against them (see [`super::strict`]).
    strict: bool,
}

/// Why a call did not reach a handler, or what the handler said.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unknown tool `{0}`; call one of the tools you were given")]
    UnknownTool(String),
    #[error("arguments are not valid JSON ({0}); send one JSON object")]
    BadJson(String),
    #[error("{0}")]
    Tool(#[from] ToolError),
    /// The handler panicked: caught, so the call fails and the run goes on (the panic's
    /// message may quote the input, so only the tool is named).
    #[error(
        "`{0}` failed with an internal error (recorded for the operators); try other arguments or another tool"
    )]
    Panicked(String),
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same registry offering strict-compatible tool schemas when `on` (`llm.strict_tools`).
    pub fn strict_tools(mut self, on: bool) -> Self {
        self.strict = on;
        self
    }

    /// Adds a tool (replacing one of the same name).
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name(), tool);
    }

    /// Adds the typed tool `T`.
    pub fn add<T: super::TypedTool>(&mut self) {
        self.register(Arc::new(super::Typed::<T>::default()));
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// All tool names.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.keys().copied().collect()
    }

    /// Specs of the allowed tools, in allow-list order (what the model is offered).
    pub fn specs(&self, allow: &[String]) -> Vec<ToolSpec> {
        allow
            .iter()
            .filter_map(|n| self.tools.get(n.as_str()))
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: if self.strict {
                    super::strict::strict_tool_parameters(&t.parameters())
                } else {
                    t.parameters()
                },
                strict: self.strict,
            })
            .collect()
    }

    /// Parses raw model arguments: tolerates a ```json code fence and empty text (= `{}`).
    pub fn parse_args(raw: &str) -> Result<Value, CallError> {
        let t = super::unfenced(raw);
        if t.is_empty() {
            return Ok(Value::Object(Default::default()));
        }
        let v: Value = serde_json::from_str(t).map_err(|e| CallError::BadJson(e.to_string()))?;
        if !v.is_object() {
            return Err(CallError::BadJson(format!("expected an object, got {v}")));
        }
        Ok(v)
    }

    /// Parses a call's raw arguments for tool `name` ([`Self::parse_args`]), then reads them as
    /// the handlers expect: `null` for an optional property is absent, and under strict tools a
    /// JSON-encoded string where the tool wants a free-form object is decoded.
    pub fn prepare_args(&self, name: &str, raw: &str) -> Result<Value, CallError> {
        let args = Self::parse_args(raw)?;
        Ok(match self.get(name) {
            Some(tool) => super::strict::args_from_strict(&tool.parameters(), args, self.strict),
            None => args,
        })
    }

    /// Validates `args` against the tool's parameter schema; the error lists every problem.
    pub fn validate(tool: &dyn Tool, args: &Value) -> Result<(), ToolError> {
        let schema = tool.parameters();
        let validator = jsonschema::draft7::new(&schema)
            .map_err(|e| ToolError::Invalid(format!("tool schema is invalid: {e}")))?;
        let mut hints: Vec<String> = Vec::new();
        let errors: Vec<String> = validator
            .iter_errors(args)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    if let Some(props) = schema["properties"].as_object().filter(|p| !p.is_empty())
                    {
                        let names: Vec<&str> = props.keys().map(String::as_str).collect();
                        push_once(
                            &mut hints,
                            format!("the arguments are {}", names.join(", ")),
                        );
                    }
                    e.to_string()
                } else {
                    // What the argument should be, in the tool's own words (a model that sent
                    // "json_schema" where an object belongs learns what the object is).
                    let top = path.trim_start_matches('/').split('/').next().unwrap_or("");
                    if let Some(d) = schema["properties"][top]["description"].as_str() {
                        push_once(&mut hints, format!("{top}: {d}"));
                    }
                    format!("{path}: {e}")
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else if hints.is_empty() {
            Err(ToolError::Invalid(errors.join("; ")))
        } else {
            Err(ToolError::Invalid(format!(
                "{} (expected — {})",
                errors.join("; "),
                hints.join("; ")
            )))
        }
    }

    /// Resolves, validates, checks the subject ([`super::scope::check`]) and runs a call.
    pub async fn execute(
        &self,
        ctx: &mut ToolCtx<'_>,
        name: &str,
        args: &Value,
    ) -> Result<Value, CallError> {
        let tool = self
            .get(name)
            .ok_or_else(|| CallError::UnknownTool(name.to_string()))?;
        Self::validate(tool.as_ref(), args)?;
        super::scope::check(ctx, tool.as_ref(), args).await?;
        // A panic in a handler (a bug meeting an input nobody foresaw) fails this call as a tool
        // error, which the loop audits and rolls back, instead of the job and its retries.
        use futures::FutureExt;
        match std::panic::AssertUnwindSafe(tool.call(ctx, args.clone()))
            .catch_unwind()
            .await
        {
            Ok(r) => Ok(r?),
            Err(_) => {
                tracing::error!(
                    tool = name,
                    "a tool handler panicked; the call fails as a tool error"
                );
                metrics::counter!("agentd_tool_panics_total").increment(1);
                Err(CallError::Panicked(name.to_string()))
            }
        }
    }
}

fn push_once(hints: &mut Vec<String>, h: String) {
    if !hints.contains(&h) {
        hints.push(h);
    }
}
