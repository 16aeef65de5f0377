//! What the tools of prompts and schemas share. Both kinds are versioned ([`Versioned`]: a
//! revid `"<id>:<version>"` names a version, an update inserts version + 1), so `get_<kind>`,
//! `list_<kind>s` and `delete_<kind>` are written once here for any [`Kind`] and declared for
//! each kind by [`kind_tools!`], which also gives `update_<kind>` its targets and snapshot
//! (both act on one [`Item`]). A kind's module says how its rows read to the model ([`Kind`])
//! and how a new version is made (its update tool's `save`).

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

/// The arguments of `update_<kind>` and `delete_<kind>`: one item of kind `Row`, every version.
pub(crate) trait Item: Sync {
    type Row: Kind;
    /// The item's id.
    fn id(&self) -> Uuid;
}

/// `update_<kind>`'s snapshot: the latest version, locked.
pub(crate) async fn update_snapshot<A: Item>(args: &A, ctx: &mut ToolCtx<'_>) -> Out {
    let id = args.id();
    Ok(
        match versions::latest::<A::Row>(ctx.conn, ctx.org_id, id, true).await? {
            Some(row) => row.latest_snapshot(),
            None => missing(A::Row::ID, id),
        },
    )
}

/// `delete_<kind>`: every version, once [`Kind::check_delete`] passed.
pub(crate) async fn delete<A: Item>(args: &A, ctx: &mut ToolCtx<'_>) -> Out {
    let id = args.id();
    A::Row::check_delete(ctx, id).await?;
    let n = versions::delete::<A::Row>(ctx.conn, ctx.org_id, id).await?;
    if n == 0 {
        return Err(not_in_org(A::Row::KIND, id));
    }
    let mut out = json!({"deleted": true, "versions_deleted": n});
    out[A::Row::ID] = json!(id);
    Ok(out)
}

/// `delete_<kind>`'s snapshot: every version, locked, and the rows depending on them.
pub(crate) async fn delete_snapshot<A: Item>(args: &A, ctx: &mut ToolCtx<'_>) -> Out {
    let id = args.id();
    let versions = versions::lock_all::<A::Row>(ctx.conn, ctx.org_id, id).await?;
    if versions.is_empty() {
        return Ok(missing(A::Row::ID, id));
    }
    let versions: Vec<Value> = versions.iter().map(Kind::version_snapshot).collect();
    let mut out = json!({"exists": true, "versions": versions});
    out[A::Row::ID] = json!(id);
    A::Row::dependents(ctx, id, &mut out).await?;
    Ok(out)
}

/// Declares the tools of kind `$kind` (`prompt`, `schema`; its rows `$row`, a [`Kind`]) that are
/// the same for every kind, their descriptions from one text each: `get_<kind>` (`$get`, its
/// argument `$revid`; `$shows` says what it shows), `list_<kind>s` (`$list`; `$lists`, what it
/// lists) and `delete_<kind>` (`$delete`; `$deletes`, what else deleting does); and the handler
/// of `update_<kind>` (`$update`, its argument `$id`), whose arguments the kind's module
/// declares, with their `save`.
macro_rules! kind_tools {
    // `update_<kind>` and `delete_<kind>`: proposable, on every version of item `$id`, which is
    // what they touch; `$run` and `$snapshot` take the arguments and the context.
    (@item $tool:ident($id:ident): $row:ty, $run:path, $snapshot:path) => {
        impl $crate::tools::versioned::Item for $tool {
            type Row = $row;
            fn id(&self) -> ::uuid::Uuid {
                self.$id.0
            }
        }

        impl $crate::tools::TypedTool for $tool {
            const PROPOSABLE: bool = true;

            fn targets(&self) -> Vec<$crate::tools::Target> {
                vec![<$row as $crate::tools::versioned::Kind>::target(self.$id.0)]
            }
            async fn run(self, ctx: &mut $crate::tools::ToolCtx<'_>)
                -> $crate::tools::versioned::Out {
                $run(&self, ctx).await
            }
            async fn snapshot(&self, ctx: &mut $crate::tools::ToolCtx<'_>)
                -> $crate::tools::versioned::Out {
                $snapshot(self, ctx).await
            }
        }
    };
    (
        $kind:ident: $row:ty,
        get $get:ident($revid:ident) $shows:literal,
        list $list:ident $lists:literal,
        update $update:ident($id:ident),
        delete $delete:ident $deletes:literal $(,)?
    ) => {
        $crate::tools::typed::tool! {
            #[doc = concat!("`get_", stringify!($kind), "`.")]
            $get {
                #[doc = concat!("\"<", stringify!($kind), "_id>:<version>\", as returned by ",
                                "create_", stringify!($kind), ".")]
                $revid: String,
            } = Read concat!("get_", stringify!($kind)),
            concat!("Get one ", stringify!($kind), " version {", stringify!($revid), ": \"<",
                    stringify!($kind), "_id>:<version>\"} (a bare ", stringify!($kind),
                    "_id means its latest version): ", $shows, ".")
        }

        impl $crate::tools::TypedTool for $get {
            async fn run(self, ctx: &mut $crate::tools::ToolCtx<'_>)
                -> $crate::tools::versioned::Out {
                $crate::tools::versioned::get::<$row>(ctx, &self.$revid).await
            }
        }

        $crate::tools::typed::tool! {
            #[doc = concat!("`list_", stringify!($kind), "s` (no arguments).")]
            $list {} = Read concat!("list_", stringify!($kind), "s"),
            concat!("List the organisation's ", stringify!($kind), "s (latest version of each): ",
                    $lists, ".")
        }

        impl $crate::tools::TypedTool for $list {
            async fn run(self, ctx: &mut $crate::tools::ToolCtx<'_>)
                -> $crate::tools::versioned::Out {
                $crate::tools::versioned::list::<$row>(ctx).await
            }
        }

        $crate::tools::versioned::kind_tools!(@item $update($id): $row,
            Self::save, $crate::tools::versioned::update_snapshot);

        $crate::tools::typed::tool! {
            #[doc = concat!("`delete_", stringify!($kind), "`.")]
            $delete {
                #[doc = concat!("The ", stringify!($kind), "'s id.")]
                $id: $crate::tools::typed::AnyVersionId,
            } = Destructive concat!("delete_", stringify!($kind)),
            concat!("Delete a ", stringify!($kind), " {", stringify!($id),
                    "} with all its versions. ", $deletes)
        }

        $crate::tools::versioned::kind_tools!(@item $delete($id): $row,
            $crate::tools::versioned::delete, $crate::tools::versioned::delete_snapshot);
    };
}
pub(crate) use kind_tools;

/// What a tool answers.
pub(crate) type Out = Result<Value, ToolError>;
