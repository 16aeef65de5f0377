//! The OpenAPI 3.1 document of `/v1`, served at `GET /v1/openapi.json` (the only `/v1` route
//! without a key). It is generated from the handlers' `#[utoipa::path]` annotations (where each
//! parameter is read, an `operationId` per route, the answers and their types) and then
//! completed here, once for every route, with what the shared layers answer: the problem details
//! of authentication (401), of a stray or bad query parameter or path id (400), of an id not in
//! the key's org (404) and of the body extractor (413, 415, 422), each with the `Problem`
//! schema. `tests/it/api_openapi.rs` reads the served document back (unique operationIds, no query
//! parameter in a path) and runs Schemathesis against a real `agentd serve`.

use super::error::{self, ProblemBody};
use super::{
    also_found, approvals, artifacts, console_routes, documents, events, forks, jobs, keys,
    operate, provider_key, reads, settings, suggestions, webhooks,
};
use axum::http::StatusCode;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::response::Response;
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, OpenApi as Document, Ref, RefOr};
use utoipa::{Modify, OpenApi};

/// The OpenAPI document (generated from the handlers' annotations, completed by [`Problems`]).
#[derive(OpenApi)]
#[openapi(
    info(title = "agentd API", description = "Documents, proposals, approvals, suggestions, runs and jobs of one org (the API key's). Every error is an RFC 9457 problem detail (`application/problem+json`)."),
    paths(
        documents::create, documents::list, documents::get, documents::accept, documents::reject,
        documents::refine, also_found::add, artifacts::schemas, artifacts::prompts, artifacts::tags,
        approvals::list, approvals::get, approvals::approve, approvals::reject,
        reads::suggestions, suggestions::dismiss, suggestions::shown, reads::run, reads::status, reads::usage,
        console_routes::me, console_routes::queue, console_routes::retry, console_routes::runs,
        jobs::create, jobs::list, jobs::get,
        operate::cancel, operate::cancel_run, operate::pause_kind, operate::resume_kind,
        operate::retry_dead, operate::cancel_dead, forks::fork, forks::adopt,
        settings::get, settings::patch,
        provider_key::get, provider_key::put, provider_key::delete,
        events::list, events::stream,
        webhooks::create, webhooks::list, webhooks::delete,
        keys::list, keys::create, keys::revoke,
    ),
    components(schemas(ProblemBody, crate::org_settings::Timezone)),
    tags(
        (name = "documents", description = "Upload documents (auto-create enqueued with them), decide their proposals, refine them with instructions; the schemas, prompts and tags an upload may start from."),
        (name = "approvals", description = "Actions waiting for a person: approve (with `If-Match`) or reject."),
        (name = "suggestions", description = "What the nightly job suggests."),
        (name = "runs", description = "Agent runs: transcript and audit trail."),
        (name = "jobs", description = "Enqueue, read, retry and cancel the org's jobs."),
        (name = "status", description = "The org's queue, runs, approvals and budget at a glance."),
        (name = "console", description = "What the web console reads: the key, the queue view; pausing and resuming a kind."),
        (name = "settings", description = "The org's settings (admin)."),
        (name = "events", description = "The org's events by cursor, and as Server-Sent Events."),
        (name = "webhooks", description = "Webhook subscriptions (admin)."),
        (name = "keys", description = "The org's API keys (admin)."),
    ),
    modifiers(&BearerAuth, &Problems, &ClosedBodies, &PageItems),
)]
pub struct ApiDoc;

/// `GET /v1/openapi.json`.
pub async fn serve_json() -> axum::response::Response {
    error::json_response(StatusCode::OK, &ApiDoc::openapi())
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // Every route needs a key: said once for the document, not on each path.
        openapi.security = Some(vec![SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

/// Adds what every route can answer (by the layers all routes share) and gives every error
/// answer the `Problem` body.
struct Problems;

/// What a status means when a route's annotation does not say more.
fn meaning(status: &str) -> &'static str {
    match status {
        "400" => {
            "The request cannot be read: malformed JSON, a path id or query parameter that is not \
             what the route takes, an unknown cursor, or a query string on a route that takes \
             none (`field` names it)"
        }
        "401" => "No key, or an unknown or revoked one (`WWW-Authenticate: Bearer`)",
        "403" => "The key's role does not include this",
        "404" => "No such item in the key's org (another org's ids are never confirmed)",
        "409" => "The item is not in a state that allows this",
        "410" => "Gone: the approval expired",
        "412" => "`If-Match` does not match",
        "413" => "The body is larger than this route accepts; nothing was stored",
        "415" => "The body is not `Content-Type: application/json`",
        "503" => {
            "Over the server's limits: more requests at once than `api.max_concurrent_requests` \
             or uploads than `api.max_concurrent_uploads` (`Retry-After`), or not answered \
             within `api.request_timeout_secs`; retry"
        }
        "429" => {
            "Past a rate of `api.requests_per_minute_per_key`, `api.requests_per_minute_per_org` \
             or, for requests that enqueue model runs, `api.runs_per_minute_per_key`, or past \
             `api.refused_per_minute_per_source` unknown keys from this address; retry after \
             `Retry-After` seconds (nothing was read or written)"
        }
        "422" => {
            "Well-formed but invalid: a wrong type, a missing or unknown field, a failed check \
             (`field` names it); nothing was written"
        }
        _ => "An error",
    }
}

impl Modify for Problems {
    fn modify(&self, openapi: &mut Document) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let takes_id = path.contains("{id}");
            let ops = [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ];
            for op in ops.into_iter().flatten() {
                complete(op, takes_id);
            }
        }
    }
}

fn complete(op: &mut Operation, takes_id: bool) {
    // An optional body is absent or an object, never `null`: utoipa writes `Option<T>` as
    // `oneOf: [null, T]`, which a generated client may send as `null` (or fail to leave out).
    for content in op
        .request_body
        .iter_mut()
        .flat_map(|b| b.content.values_mut())
    {
        if let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema {
            let mut not_null = one_of.items.iter().filter(|s| !is_null(s));
            if let (Some(only), None) = (not_null.next(), not_null.next()) {
                content.schema = Some(only.clone());
            }
        }
    }
    // A header is sent or not, never `null`: utoipa types an optional header `[T, "null"]`,
    // which generated clients take for "may be None" (and then send `None`).
    for param in op.parameters.iter_mut().flatten() {
        if param.parameter_in != ParameterIn::Header {
            continue;
        }
        if let Some(RefOr::T(Schema::Object(o))) = &mut param.schema
            && let SchemaType::Array(types) = &o.schema_type
        {
            let mut types: Vec<Type> = types
                .iter()
                .filter(|t| **t != Type::Null)
                .cloned()
                .collect();
            if types.len() == 1 {
                o.schema_type = SchemaType::Type(types.remove(0));
            }
        }
    }
    let mut shared = vec!["400", "401", "429", "503"];
    if takes_id {
        shared.push("404");
    }
    if op.request_body.is_some() {
        shared.extend(["413", "415", "422"]);
    }
    for status in shared {
        op.responses
            .responses
            .entry(status.to_string())
            .or_insert_with(|| RefOr::T(Response::new(meaning(status))));
    }
    for (status, answer) in op.responses.responses.iter_mut() {
        let RefOr::T(answer) = answer else { continue };
        if !status.starts_with('4') && !status.starts_with('5') {
            continue;
        }
        if answer.description.is_empty() {
            answer.description = meaning(status).to_string();
        }
        if answer.content.is_empty() {
            let body = Content::new(Some(Ref::from_schema_name("Problem")));
            answer
                .content
                .insert("application/problem+json".to_string(), body);
        }
    }
}

/// `{"type": "null"}`.
fn is_null(s: &RefOr<Schema>) -> bool {
    matches!(s, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null))
}

/// Request bodies refuse unknown fields (`JsonBody`), which utoipa says for structs
/// (`additionalProperties: false`) but not for the variants of a tagged enum (`POST /v1/jobs`):
/// said here for those.
struct ClosedBodies;

impl Modify for ClosedBodies {
    fn modify(&self, openapi: &mut Document) {
        use utoipa::openapi::schema::{AdditionalProperties, Schema};
        let mut bodies = Vec::new();
        for item in openapi.paths.paths.values() {
            let ops = [&item.post, &item.put, &item.patch];
            for op in ops.into_iter().flatten() {
                let Some(body) = &op.request_body else {
                    continue;
                };
                for content in body.content.values() {
                    if let Some(RefOr::Ref(r)) = &content.schema {
                        bodies.push(r.ref_location.rsplit('/').next().unwrap_or("").to_string());
                    }
                }
            }
        }
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        for name in bodies {
            if let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(&name) {
                for variant in &mut one_of.items {
                    if let RefOr::T(Schema::Object(o)) = variant {
                        o.additional_properties =
                            Some(Box::new(AdditionalProperties::FreeForm(false)));
                    }
                }
            }
        }
    }
}

/// A page (`Paged_X`) refers to its item's schema `X` instead of a copy of it (utoipa inlines a
/// generic's argument): a client generator then makes one type of an approval whether it came
/// from the list or from `GET /v1/approvals/{id}`. Only a copy equal to `X` is replaced.
struct PageItems;

impl Modify for PageItems {
    fn modify(&self, openapi: &mut Document) {
        use utoipa::openapi::schema::ArrayItems;
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        let pages: Vec<String> = components
            .schemas
            .keys()
            .filter(|n| n.starts_with("Paged_"))
            .cloned()
            .collect();
        for page in pages {
            let item = page.trim_start_matches("Paged_").to_string();
            let Some(RefOr::T(named)) = components.schemas.get(&item).cloned() else {
                continue;
            };
            let Some(RefOr::T(Schema::Object(o))) = components.schemas.get_mut(&page) else {
                continue;
            };
            let Some(RefOr::T(Schema::Array(items))) = o.properties.get_mut("items") else {
                continue;
            };
            if let ArrayItems::RefOrSchema(copy) = &items.items
                && **copy == RefOr::T(named)
            {
                items.items = ArrayItems::RefOrSchema(Box::new(Ref::from_schema_name(item).into()));
            }
        }
    }
}
