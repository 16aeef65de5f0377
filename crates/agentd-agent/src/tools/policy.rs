//! The tool policy of a job kind: an allow-list, a decision per category and per-tool overrides.

use super::Category;
use crate::catalog::{PolicyDecision, PolicySpec};
use std::collections::BTreeMap;

/// What the loop may do with each tool.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Tools offered to the model; anything else is "unknown" to it.
    pub allow: Vec<String>,
    pub read: PolicyDecision,
    pub write: PolicyDecision,
    pub destructive: PolicyDecision,
    pub overrides: BTreeMap<String, PolicyDecision>,
}

impl Policy {
    /// From a job file's `[agent]` section.
    pub fn from_spec(allow: &[String], spec: &PolicySpec) -> Self {
        Self {
            allow: allow.to_vec(),
            read: spec.read,
            write: spec.write,
            destructive: spec.destructive,
            overrides: spec.tools.clone(),
        }
    }

    /// True if the tool is in the allow-list.
    pub fn allows(&self, tool: &str) -> bool {
        self.allow.iter().any(|t| t == tool)
    }

    /// The decision for a call of `tool` in `category`.
    pub fn decide(&self, tool: &str, category: Category) -> PolicyDecision {
        if let Some(d) = self.overrides.get(tool) {
            return *d;
        }
        match category {
            Category::Read => self.read,
            Category::Write => self.write,
            Category::Destructive => self.destructive,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::Declaration;
    use crate::tools::documents::{DeleteDocument, UpdateDocument};
    use crate::tools::suggestions::CreateSuggestion;

    #[test]
    fn overrides_win_over_categories() {
        let p = Policy {
            allow: vec!["a".into()],
            read: PolicyDecision::Auto,
            write: PolicyDecision::Propose,
            destructive: PolicyDecision::Deny,
            overrides: [(CreateSuggestion::NAME.to_string(), PolicyDecision::Auto)].into(),
        };
        assert_eq!(
            p.decide(UpdateDocument::NAME, Category::Write),
            PolicyDecision::Propose
        );
        assert_eq!(
            p.decide(CreateSuggestion::NAME, Category::Write),
            PolicyDecision::Auto
        );
        assert_eq!(
            p.decide(DeleteDocument::NAME, Category::Destructive),
            PolicyDecision::Deny
        );
        assert!(p.allows("a") && !p.allows("b"));
    }
}
