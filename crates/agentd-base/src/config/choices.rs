//! Settings that name one of a few choices, as enums: a typo in a config file or an environment
//! variable is refused when the config is read, with the key and the choices in the message.

use serde::Deserialize;
use std::time::Duration;

/// Declares a choice: its variants with their config spellings, and the message for anything
/// else.
macro_rules! choice {
    ($(#[$doc:meta])* $name:ident, $key:literal, $choices:literal { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
        #[serde(try_from = "String")]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            /// As written in the config.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = super::Invalid;
            fn try_from(s: String) -> Result<Self, super::Invalid> {
                match s.as_str() {
                    $($text => Ok($name::$variant),)+
                    _ => Err(super::Invalid::new(
                        $key,
                        format!(concat!($key, " must be ", $choices, " (got {:?})"), s),
                    )),
                }
            }
        }
    };
}

choice!(
    /// `llm.provider`: `openai`, `anthropic`, `offline`, or `auto` (openai when a key or base
    /// URL is set).
    ProviderChoice, "llm.provider", "one of auto, openai, anthropic, offline" {
        Auto = "auto",
        OpenAi = "openai",
        Anthropic = "anthropic",
        Offline = "offline",
    }
);

choice!(
    /// `llm.providers[].kind`: what speaks to an entry's endpoint: `openai` (any
    /// OpenAI-compatible server), `offline` (the in-process heuristic), `anthropic` (the Messages
    /// API, `llm::anthropic`). `llm::chain::build` makes each entry's provider from it.
    ProviderKind, "llm.providers[].kind", "one of openai, offline, anthropic" {
        OpenAi = "openai",
        Offline = "offline",
        Anthropic = "anthropic",
    }
);

choice!(
    /// `log.format`: text or JSON lines.
    LogFormat, "log.format", "text or json" {
        Text = "text",
        Json = "json",
    }
);

choice!(
    /// `otel.protocol`: OTLP over HTTP with protobuf bodies, or gRPC.
    OtlpProtocol, "otel.protocol", "http/protobuf or grpc" {
        HttpProtobuf = "http/protobuf",
        Grpc = "grpc",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_read_their_spelling_and_name_the_key_otherwise() {
        assert_eq!(
            ProviderChoice::try_from("openai".to_string()),
            Ok(ProviderChoice::OpenAi)
        );
        assert_eq!(
            LogFormat::try_from("json".to_string()).map(LogFormat::as_str),
            Ok("json")
        );
        assert_eq!(
            ProviderChoice::try_from("anthropic".to_string()),
            Ok(ProviderChoice::Anthropic)
        );
        assert_eq!(
            ProviderChoice::try_from("claude".to_string()).map_err(|e| e.to_string()),
            Err(
                "llm.provider must be one of auto, openai, anthropic, offline (got \"claude\")"
                    .into()
            )
        );
        let yaml = LogFormat::try_from("yaml".to_string()).unwrap_err();
        assert_eq!(
            (yaml.key.as_str(), yaml.to_string()),
            (
                "log.format",
                "log.format must be text or json (got \"yaml\")".into()
            )
        );
    }
}

/// How many jobs a worker claims beyond its free slots into a local buffer (graphile-worker's
/// local queue): the claims of a backlog of short jobs grow from one slot's worth to hundreds,
/// one commit for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefetch {
    /// Always this many (0: claim only what fits the free slots).
    Fixed(u32),
    /// As many as the worker finishes in [`AUTO_PREFETCH_WINDOW`] at the job duration it
    /// measured (recent successful jobs, weighted toward the latest; a failure says nothing of
    /// how long work takes): hundreds for jobs of microseconds, none for agent runs of seconds —
    /// so a busy worker never sits on more than a few milliseconds of work another worker could
    /// start. Nothing before the first job succeeds.
    Auto,
}

/// How much work, in time, an automatic prefetch buffer holds at most.
pub const AUTO_PREFETCH_WINDOW: Duration = Duration::from_millis(20);

impl Prefetch {
    /// The buffer's size for a worker of `concurrency` slots whose jobs take `job_micros` on
    /// average (`None`: no job finished yet).
    pub fn size(self, concurrency: usize, job_micros: Option<f64>) -> u32 {
        match self {
            Prefetch::Fixed(n) => n,
            Prefetch::Auto => match job_micros {
                Some(d) if d > 0.0 => {
                    let window = AUTO_PREFETCH_WINDOW.as_micros() as f64;
                    (concurrency as f64 * window / d).min(u32::MAX as f64) as u32
                }
                _ => 0,
            },
        }
    }
}

/// `worker.prefetch` as written: `"auto"` or a count (an environment override arrives as text).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum PrefetchSetting {
    Count(u32),
    Word(String),
}

impl PrefetchSetting {
    /// The setting, or what is wrong with it.
    pub fn parse(&self) -> Result<Prefetch, String> {
        match self {
            PrefetchSetting::Count(n) => Ok(Prefetch::Fixed(*n)),
            PrefetchSetting::Word(w) if w.trim().eq_ignore_ascii_case("auto") => Ok(Prefetch::Auto),
            PrefetchSetting::Word(w) => w.trim().parse().map(Prefetch::Fixed).map_err(|_| {
                format!("worker.prefetch must be \"auto\" or a number of jobs (0: none), got {w:?}")
            }),
        }
    }
}
