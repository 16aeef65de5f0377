//! The price table, `[llm.prices]`: per model, cents per million input, output, cached-input
//! (prompt cache reads) and cache-write tokens; and the one function that prices a model's
//! tokens, [`cost`]. Every figure in money agentd shows (a run, a document's report, an org's
//! usage, the demo, the eval) and the token limit a cost cap (`cost_cap_cents`) becomes come
//! from here.
//!
//! Money is counted in whole nano-dollars ([`NanoUsd`], an `i64`): a call's cost is computed
//! in integers (pico-dollars per token, rounded once per call to a nano-dollar) and summed as
//! integers in the database, so sums carry no floating-point error. A model without a price has
//! no cost (`None`), never a guessed one.

use serde::Deserialize;
use std::collections::BTreeMap;

/// A model's price, in cents per million tokens. `cached_input_cents_per_mtok` prices input
/// read from the provider's prompt cache (OpenAI's `cached_tokens`, Anthropic's
/// `cache_read_input_tokens`), `cache_write_cents_per_mtok` input written to it (Anthropic's
/// `cache_creation_input_tokens`); either absent: the input price.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input_cents_per_mtok: f64,
    pub output_cents_per_mtok: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_cents_per_mtok: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_cents_per_mtok: Option<f64>,
}

/// The table: model name → price.
pub type Prices = BTreeMap<String, ModelPrice>;

/// Tokens of one call (or a sum of calls) as they are priced. `input` is every input token, the
/// cache's among them: `cache_read` and `cache_write` are parts of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

/// An amount of US dollars in nano-dollars (10⁻⁹ $).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct NanoUsd(pub i64);

impl NanoUsd {
    /// The amount in dollars, rounded to the micro-dollar (what the API shows as `cost_usd`).
    pub fn dollars(self) -> f64 {
        micros(self.0) as f64 / 1e6
    }
}

/// `nanos` rounded to whole micro-dollars (half up).
fn micros(nanos: i64) -> i64 {
    nanos.saturating_add(500).div_euclid(1000)
}

/// Dollars as agentd prints them: `$0.004215` (six decimals) under a dollar, `$12.3457` (four)
/// from one up.
pub fn format_usd(nanos: i64) -> String {
    let m = micros(nanos);
    if m < 1_000_000 {
        format!("${}.{:06}", m / 1_000_000, m % 1_000_000)
    } else {
        let tenth_millis = (m + 50) / 100;
        format!("${}.{:04}", tenth_millis / 10_000, tenth_millis % 10_000)
    }
}

impl std::fmt::Display for NanoUsd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_usd(self.0))
    }
}

/// A price in cents per million tokens as pico-dollars (10⁻¹² $) per token: 1 cent per million
/// tokens is 10⁻⁸ $ a token, 10,000 pico-dollars. Exact for prices with up to four decimals.
fn pico_per_token(cents_per_mtok: f64) -> u128 {
    if cents_per_mtok.is_finite() && cents_per_mtok > 0.0 {
        (cents_per_mtok * 10_000.0).round() as u128
    } else {
        0
    }
}

impl ModelPrice {
    /// The price of cache reads (the input price when the provider has none).
    pub fn cached_input(&self) -> f64 {
        self.cached_input_cents_per_mtok
            .unwrap_or(self.input_cents_per_mtok)
    }

    /// The price of cache writes (the input price when the provider has none).
    pub fn cache_write(&self) -> f64 {
        self.cache_write_cents_per_mtok
            .unwrap_or(self.input_cents_per_mtok)
    }

    /// The highest of the four prices: a cost cap becomes tokens at it, so the cap holds
    /// whatever the mix of input, output and cache.
    pub fn max_cents_per_mtok(&self) -> f64 {
        self.input_cents_per_mtok
            .max(self.output_cents_per_mtok)
            .max(self.cached_input())
            .max(self.cache_write())
    }

    /// What `t` costs at this price (cache reads and writes past the input are counted as
    /// input: they cannot be more than it).
    pub fn cost(&self, t: &TokenCounts) -> NanoUsd {
        let read = t.cache_read.min(t.input);
        let write = t.cache_write.min(t.input - read);
        let plain = t.input - read - write;
        let pico = u128::from(plain) * pico_per_token(self.input_cents_per_mtok)
            + u128::from(read) * pico_per_token(self.cached_input())
            + u128::from(write) * pico_per_token(self.cache_write())
            + u128::from(t.output) * pico_per_token(self.output_cents_per_mtok);
        let nanos = (pico + 500) / 1000;
        NanoUsd(i64::try_from(nanos).unwrap_or(i64::MAX))
    }

    /// Each price is a finite number ≥ 0 (`key` names the entry in an error).
    pub(super) fn check(&self, key: &str) -> Result<(), super::Invalid> {
        let parts = [
            ("input_cents_per_mtok", Some(self.input_cents_per_mtok)),
            ("output_cents_per_mtok", Some(self.output_cents_per_mtok)),
            (
                "cached_input_cents_per_mtok",
                self.cached_input_cents_per_mtok,
            ),
            (
                "cache_write_cents_per_mtok",
                self.cache_write_cents_per_mtok,
            ),
        ];
        for (name, v) in parts {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                let key = format!("{key}.{name}");
                let message = format!("{key} must be cents per million tokens, ≥ 0 (got {v})");
                return Err(super::Invalid::new(key, message));
            }
        }
        Ok(())
    }
}

/// `model` without a trailing snapshot date or `-latest`, as providers name the model that
/// answered (`claude-sonnet-4-5-20250929`, `gpt-4o-mini-2024-07-18`).
fn undated(model: &str) -> &str {
    if let Some(m) = model.strip_suffix("-latest") {
        return m;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if let Some((m, d)) = model.rsplit_once('-')
        && d.len() == 8
        && digits(d)
    {
        return m;
    }
    // -YYYY-MM-DD: three parts of 4, 2 and 2 digits.
    let mut parts = model.rsplitn(4, '-');
    if let (Some(dd), Some(mm), Some(yyyy), Some(m)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
        && (yyyy.len(), mm.len(), dd.len()) == (4, 2, 2)
        && digits(yyyy)
        && digits(mm)
        && digits(dd)
    {
        return m;
    }
    model
}

/// The price of `model`: its own entry, else that of its name without a snapshot date.
pub fn price_of<'a>(prices: &'a Prices, model: &str) -> Option<&'a ModelPrice> {
    prices.get(model).or_else(|| prices.get(undated(model)))
}

/// What `tokens` of the first of `models` with a price cost (the model asked for, then the one
/// that answered); `None`: none of them has a price.
pub fn cost(prices: &Prices, models: &[&str], tokens: &TokenCounts) -> Option<NanoUsd> {
    models
        .iter()
        .find_map(|m| price_of(prices, m))
        .map(|p| p.cost(tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(i: f64, o: f64, r: Option<f64>, w: Option<f64>) -> ModelPrice {
        ModelPrice {
            input_cents_per_mtok: i,
            output_cents_per_mtok: o,
            cached_input_cents_per_mtok: r,
            cache_write_cents_per_mtok: w,
        }
    }

    #[test]
    fn tokens_times_prices_in_integers() {
        // gpt-4o-mini: $0.15 / $0.60 per million, cached $0.075.
        let p = price(15.0, 60.0, Some(7.5), None);
        let t = TokenCounts {
            input: 1_000_000,
            cache_read: 0,
            cache_write: 0,
            output: 1_000_000,
        };
        assert_eq!(p.cost(&t), NanoUsd(750_000_000));
        let t = TokenCounts {
            input: 1200,
            cache_read: 1000,
            cache_write: 0,
            output: 80,
        };
        // 200 × 150,000 + 1000 × 75,000 + 80 × 600,000 pico-dollars: $0.000153.
        assert_eq!(p.cost(&t), NanoUsd(153_000));
        // Anthropic's cache write (claude-sonnet-4-5: $3 in, $15 out, $0.30 read, $3.75 write).
        let s = price(300.0, 1500.0, Some(30.0), Some(375.0));
        let t = TokenCounts {
            input: 1_100,
            cache_read: 1000,
            cache_write: 100,
            output: 10,
        };
        // 1000 × 300,000 + 100 × 3,750,000 + 10 × 15,000,000 pico-dollars: $0.000825.
        assert_eq!(s.cost(&t), NanoUsd(825_000));
        // Cache counts past the input are not priced twice.
        let t = TokenCounts {
            input: 10,
            cache_read: 50,
            cache_write: 50,
            output: 0,
        };
        assert_eq!(s.cost(&t), NanoUsd(3_000));
        assert_eq!(s.max_cents_per_mtok(), 1500.0);
        assert_eq!(
            price(300.0, 100.0, None, Some(375.0)).max_cents_per_mtok(),
            375.0
        );
    }

    #[test]
    fn a_sum_of_calls_costs_what_its_tokens_cost() {
        let p = price(15.0, 60.0, Some(7.5), None);
        let one = TokenCounts {
            input: 7,
            cache_read: 3,
            cache_write: 0,
            output: 3,
        };
        let all = TokenCounts {
            input: 7000,
            cache_read: 3000,
            cache_write: 0,
            output: 3000,
        };
        let sum: i64 = (0..1000).map(|_| p.cost(&one).0).sum();
        // 4 × 150,000 + 3 × 75,000 + 3 × 600,000 pico = 2,625 nano a call.
        assert_eq!((sum, p.cost(&all).0), (2_625_000, 2_625_000));
    }

    #[test]
    fn snapshot_names_find_their_model() {
        let mut prices = Prices::new();
        prices.insert("gpt-4o-mini".into(), price(15.0, 60.0, None, None));
        prices.insert("claude-sonnet-4-5".into(), price(300.0, 1500.0, None, None));
        for m in [
            "gpt-4o-mini",
            "gpt-4o-mini-2024-07-18",
            "claude-sonnet-4-5-20250929",
            "claude-sonnet-4-5-latest",
        ] {
            assert!(price_of(&prices, m).is_some(), "{m}");
        }
        for m in ["gpt-4o", "gpt-4o-mini-x", "claude-sonnet-4", "qwen"] {
            assert!(price_of(&prices, m).is_none(), "{m}");
        }
        let t = TokenCounts {
            input: 1000,
            ..TokenCounts::default()
        };
        assert_eq!(
            cost(&prices, &["qwen", "gpt-4o-mini-2024-07-18"], &t),
            Some(NanoUsd(150_000))
        );
        assert_eq!(cost(&prices, &["qwen", "offline"], &t), None);
    }

    #[test]
    fn dollars_print_with_six_or_four_decimals() {
        assert_eq!(format_usd(0), "$0.000000");
        assert_eq!(format_usd(1_530), "$0.000002");
        assert_eq!(format_usd(4_215_400), "$0.004215");
        assert_eq!(format_usd(999_999_400), "$0.999999");
        assert_eq!(format_usd(12_345_678_900), "$12.3457");
        assert_eq!(NanoUsd(4_215_600).dollars(), 0.004216);
    }

    #[test]
    fn a_file_or_the_environment_prices_models_over_the_list_prices() {
        use crate::config::Config;
        let text = "[llm.prices]\n\
                    \"gpt-4o-mini\" = { input_cents_per_mtok = 1.0, output_cents_per_mtok = 2 }\n\
                    \"qwen\" = { input_cents_per_mtok = 0.0, output_cents_per_mtok = 0.0 }\n";
        let c = Config::load_text(Some(("f.toml", text)), std::iter::empty()).expect("loads");
        let mini = c.llm.prices["gpt-4o-mini"];
        assert_eq!((mini.input_cents_per_mtok, mini.cached_input()), (1.0, 1.0));
        assert!(
            c.llm.prices.contains_key("claude-sonnet-4-5"),
            "the list prices stay"
        );
        assert_eq!(c.llm.operator_priced, ["gpt-4o-mini", "qwen"]);
        assert!(Config::defaults().llm.operator_priced.is_empty());
        let env = [(
            "AGENTD_LLM__PRICES".to_string(),
            "{ m = { input_cents_per_mtok = 3, output_cents_per_mtok = 4 } }".to_string(),
        )];
        let c = Config::load_text(None, env.into_iter()).expect("loads");
        assert_eq!(c.llm.prices["m"].output_cents_per_mtok, 4.0);
        assert!(c.llm.prices.contains_key("gpt-4o"));
        assert_eq!(c.llm.operator_priced, ["m"]);
        for (bad, key) in [
            (
                "{ m = { input_cents_per_mtok = -1, output_cents_per_mtok = 4 } }",
                "llm.prices",
            ),
            (
                "{ m = { input_cents_per_mtok = 1, output_cents = 4 } }",
                "output_cents",
            ),
        ] {
            let env = [("AGENTD_LLM__PRICES".to_string(), bad.to_string())];
            let e = Config::load_text(None, env.into_iter()).expect_err(bad);
            assert!(e.to_string().contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn every_list_price_is_complete() {
        let c = crate::config::Config::defaults();
        for model in [
            "gpt-4o-mini",
            "gpt-4.1",
            "o4-mini",
            "claude-sonnet-4-5",
            "claude-haiku-4-5",
        ] {
            let p = c.llm.prices.get(model).expect(model);
            assert!(p.cached_input_cents_per_mtok.is_some(), "{model}");
            assert!(p.output_cents_per_mtok > p.input_cents_per_mtok, "{model}");
        }
        for (model, p) in &c.llm.prices {
            let anthropic = model.starts_with("claude-");
            assert_eq!(p.cache_write_cents_per_mtok.is_some(), anthropic, "{model}");
        }
    }
}
