//! What the tools of prompts and schemas share. Both kinds are versioned ([`Versioned`]: a
//! revid `"<id>:<version>"` names a version, an update inserts version + 1), so what
//! `get_<kind>`, `list_<kind>s`, `update_<kind>` (its snapshot) and `delete_<kind>` do is
//! written once here for any [`Kind`]; each kind's module declares its tools and calls these.
//! A kind's module also says how its rows read to the model ([`Kind`]) and how a new version
//! is made (its update tool's `run`).

use super::summary::{Summary, quoted};
use super::{Target, ToolCtx, ToolError, listing, missing, not_in_org, resolve, revid};
use crate::store::versions::{self, Versioned};
use serde_json::{Value, json};
use uuid::Uuid;

/// A versioned kind as its tools show it to the model.
pub(crate) trait Kind: Versioned + Sync {
    /// What a change to `id` touches.
    fn target(id: Uuid) -> Target;
    /// The version as `get_<kind>` shows it.
    fn json(&self) -> Value;
    /// The latest version as `list_<kind>s` shows it.
    fn listed(self) -> Value;
    /// The latest version, locked, in `update_<kind>`'s snapshot (what a new version depends
    /// on).
    fn latest_snapshot(&self) -> Value;
    /// One version, locked, in `delete_<kind>`'s snapshot.
    fn version_snapshot(&self) -> Value;
    /// Refuses the deletion of `id` while other rows depend on it; runs before it.
    fn check_delete(
        _ctx: &mut ToolCtx<'_>,
        _id: Uuid,
    ) -> impl Future<Output = Result<(), ToolError>> + Send {
        async { Ok(()) }
    }
    /// Adds to `delete_<kind>`'s snapshot of `id` the other rows the deletion depends on
    /// (after every version is locked).
    fn dependents(
        _ctx: &mut ToolCtx<'_>,
        _id: Uuid,
        _snapshot: &mut Value,
    ) -> impl Future<Output = Result<(), ToolError>> + Send {
        async { Ok(()) }
    }
}

/// A version's ids as the model sees them: `{"<kind>_revid", "<kind>_id", "version"}`.
pub(crate) fn ids<R: Versioned>(row: &R) -> Value {
    let (id, version) = row.revision();
    let mut out = json!({ "version": version });
    out[format!("{}_revid", R::KIND)] = json!(revid(id, version));
    out[R::ID] = json!(id);
    out
}

/// Object `a` with the members of object `b` added.
pub(crate) fn merged(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// `get_<kind>`: the version `revid` names (a bare id: the latest).
pub(crate) async fn get<R: Kind>(ctx: &mut ToolCtx<'_>, revid: &str) -> Out {
    let field = format!("{}_revid", R::KIND);
    Ok(resolve::<R>(ctx, revid, &field).await?.json())
}

/// `list_<kind>s`: the latest version of each.
pub(crate) async fn list<R: Kind>(ctx: &mut ToolCtx<'_>) -> Out {
    let rows = versions::list_latest::<R>(ctx.conn, ctx.org_id).await?;
    Ok(listing(&format!("{}s", R::KIND), rows, R::listed))
}

/// The latest version of the org's `id`, locked: what a new version follows.
pub(crate) async fn latest_locked<R: Kind>(
    ctx: &mut ToolCtx<'_>,
    id: Uuid,
) -> Result<R, ToolError> {
    versions::latest::<R>(ctx.conn, ctx.org_id, id, true)
        .await?
        .ok_or_else(|| not_in_org(R::KIND, id))
}

/// `update_<kind>`'s snapshot: the latest version of `id`, locked.
pub(crate) async fn update_snapshot<R: Kind>(ctx: &mut ToolCtx<'_>, id: Uuid) -> Out {
    Ok(
        match versions::latest::<R>(ctx.conn, ctx.org_id, id, true).await? {
            Some(row) => row.latest_snapshot(),
            None => missing(R::ID, id),
        },
    )
}

/// `delete_<kind>`: every version of `id`, once [`Kind::check_delete`] passed.
pub(crate) async fn delete<R: Kind>(ctx: &mut ToolCtx<'_>, id: Uuid) -> Out {
    R::check_delete(ctx, id).await?;
    let n = versions::delete::<R>(ctx.conn, ctx.org_id, id).await?;
    if n == 0 {
        return Err(not_in_org(R::KIND, id));
    }
    let mut out = json!({"deleted": true, "versions_deleted": n});
    out[R::ID] = json!(id);
    Ok(out)
}

/// `delete_<kind>`'s snapshot: every version of `id`, locked, and the rows depending on them.
pub(crate) async fn delete_snapshot<R: Kind>(ctx: &mut ToolCtx<'_>, id: Uuid) -> Out {
    let versions = versions::lock_all::<R>(ctx.conn, ctx.org_id, id).await?;
    if versions.is_empty() {
        return Ok(missing(R::ID, id));
    }
    let versions: Vec<Value> = versions.iter().map(Kind::version_snapshot).collect();
    let mut out = json!({"exists": true, "versions": versions});
    out[R::ID] = json!(id);
    R::dependents(ctx, id, &mut out).await?;
    Ok(out)
}

/// The approval summary of `<verb>_<kind>` (`verb` capitalised): `Create schema 'Invoice'`,
/// `Delete prompt <prompt_id>` — the name given, else the id as given.
pub(crate) fn summary<R: Versioned>(verb: &str, s: &Summary<'_>) -> String {
    let name = s
        .str("name")
        .map(|n| format!(" {}", quoted(Some(n))))
        .or_else(|| s.str(R::ID).map(|i| format!(" {i}")))
        .unwrap_or_default();
    format!("{verb} {}{name}", R::KIND)
}

/// What a tool answers.
pub(crate) type Out = Result<Value, ToolError>;
