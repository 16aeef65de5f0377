//! Request extractors that answer every rejection with a problem detail: JSON bodies
//! (content type, size, UTF-8, syntax, types, unknown fields — the `field` is the JSON path),
//! query strings, path ids, and the query, cursor and pages of list routes.

use super::error::Problem;
use crate::store::api_reads::{self, Listed};
use crate::store::states::State;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Required};
use uuid::Uuid;

/// A JSON request body of type `T` (structs deny unknown fields).
pub struct JsonBody<T>(pub T);

/// A JSON body that may be absent (an empty body → `T::default()`; the OpenAPI document says
/// `requestBody.required: false` with `T`'s schema, so `null` is refused like any non-object).
pub struct OptionalJsonBody<T>(pub T);

async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, Problem> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                "the request body is larger than this route accepts; nothing was stored",
            )
            .field("body")
        } else {
            Problem::bad_request("body", format!("cannot read the request body: {e}"))
        }
    })
}

fn check_content_type(req: &Request) -> Result<(), Problem> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json")) {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            format!("send the body as Content-Type: application/json (got {ct:?})"),
        )
        .field("Content-Type"))
    }
}

/// Parses a JSON body: invalid UTF-8 → 422; malformed JSON → 400; wrong type, missing or
/// unknown field → 422 naming the field's path.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(Problem::invalid(
            "body",
            format!(
                "the body is not valid UTF-8 (first bad byte at offset {})",
                e.valid_up_to()
            ),
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value: Result<T, _> = serde_path_to_error::deserialize(&mut *de);
    if value.is_ok() {
        // Trailing data after the value is malformed JSON, not a second request.
        de.end()
            .map_err(|e| Problem::bad_request("body", format!("malformed JSON: {e}")))?;
    }
    value.map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        use serde_json::error::Category;
        match inner.classify() {
            Category::Data => {
                let msg = inner.to_string();
                // The path of an unknown field already ends with the field's name.
                let field = unknown_field(&msg)
                    .map(|f| if path == "." { f } else { path.clone() })
                    .or_else(|| missing_field(&msg).map(|f| join(&path, &f)))
                    .unwrap_or_else(|| if path == "." { "body".into() } else { path });
                let field = named(field, "body");
                Problem::invalid(field.clone(), format!("{field}: {}", strip_position(&msg)))
            }
            _ => Problem::bad_request("body", format!("malformed JSON: {inner}")),
        }
    })
}

/// Parses a request body, which is a JSON object on every route (as the OpenAPI document says):
/// as [`parse_json`], and a well-formed array is 422 too — serde reads a struct from an array of
/// its fields in order, and `[null, null]` must not be a decision.
fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    let value = parse_json(bytes)?;
    if bytes.trim_ascii_start().starts_with(b"[") {
        return Err(Problem::invalid(
            "body",
            "the body must be a JSON object (got an array)",
        ));
    }
    Ok(value)
}

/// A field to name in a problem: a key written as `""` is named as such, never as nothing (found
/// by the `api_extract` fuzz target: `{"": 1}` was refused naming the field `""`, empty).
fn named(field: String, whole: &str) -> String {
    if field.is_empty() {
        format!("{whole} (a key named \"\")")
    } else if field.ends_with('.') {
        format!("{field}\"\"")
    } else {
        field
    }
}

fn join(path: &str, field: &str) -> String {
    if path == "." || path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn backticked(msg: &str, prefix: &str) -> Option<String> {
    let rest = msg.strip_prefix(prefix)?;
    let rest = rest.strip_prefix('`')?;
    Some(rest.split('`').next()?.to_string())
}

fn unknown_field(msg: &str) -> Option<String> {
    backticked(msg, "unknown field ")
}

fn missing_field(msg: &str) -> Option<String> {
    backticked(msg, "missing field ")
}

fn strip_position(msg: &str) -> &str {
    msg.rsplit_once(" at line ").map(|(m, _)| m).unwrap_or(msg)
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        check_content_type(&req)?;
        let bytes = body_bytes(req, state).await?;
        parse_body(&bytes).map(JsonBody)
    }
}

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let has_type = req.headers().contains_key(header::CONTENT_TYPE);
        let result = if has_type {
            check_content_type(&req)
        } else {
            Ok(())
        };
        let bytes = body_bytes(req, state).await?;
        if bytes.trim_ascii().is_empty() {
            return Ok(OptionalJsonBody(T::default()));
        }
        result?;
        parse_body(&bytes).map(OptionalJsonBody)
    }
}

/// Parses a query string into `T` (structs deny unknown parameters): errors name the parameter.
pub fn parse_query<T: DeserializeOwned>(query: Option<&str>) -> Result<T, Problem> {
    let de =
        serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.unwrap_or("").as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.into_inner().to_string();
        let field = unknown_field(&msg)
            .or_else(|| missing_field(&msg))
            .unwrap_or_else(|| if path == "." { "query".into() } else { path });
        let field = named(field, "query");
        Problem::bad_request(field.clone(), format!("query parameter {field}: {msg}"))
    })
}

/// The routes that read a query string (with GET); the others answer a query string with 400
/// naming its first parameter rather than ignoring it ([`no_stray_query`]).
const TAKE_QUERY: [&str; 12] = [
    "/v1/documents",
    "/v1/jobs",
    "/v1/schemas",
    "/v1/prompts",
    "/v1/tags",
    "/v1/approvals",
    "/v1/suggestions",
    "/v1/runs",
    "/v1/events",
    "/v1/events/stream",
    "/v1/queue",
    "/v1/usage",
];

/// 400 when a route that reads no query string gets one. Checked by [`super::auth::Scoped`],
/// which every `/v1` handler takes: after routing, so a method no route serves is still 405.
pub fn no_stray_query(parts: &Parts) -> Result<(), Problem> {
    let path = parts.uri.path();
    if parts.method == axum::http::Method::GET && TAKE_QUERY.contains(&path) {
        return Ok(());
    }
    let Some(q) = parts.uri.query().filter(|q| !q.is_empty()) else {
        return Ok(());
    };
    let name = form_urlencoded::parse(q.as_bytes())
        .next()
        .map(|(k, _)| k.into_owned())
        .unwrap_or_else(|| "query".into());
    Err(Problem::bad_request(
        name.clone(),
        format!(
            "{} {path} takes no query parameters (got {name:?})",
            parts.method
        ),
    ))
}

/// A path id that must be a UUID (400 naming `id` otherwise).
pub fn uuid_id(raw: &str) -> Result<Uuid, Problem> {
    Uuid::parse_str(raw)
        .map_err(|_| Problem::bad_request("id", format!("id must be a UUID (got {raw:?})")))
}

/// A query string parsed into `T` (structs deny unknown parameters; 400 naming the parameter).
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        parse_query(parts.uri.query()).map(Params)
    }
}

/// What a route's `{id}` may be.
pub trait PathId: Sized {
    /// Parses the raw segment (400 naming `id` otherwise).
    fn parse(raw: &str) -> Result<Self, Problem>;
}

impl PathId for Uuid {
    fn parse(raw: &str) -> Result<Self, Problem> {
        uuid_id(raw)
    }
}

/// A job's id: a positive number.
impl PathId for i64 {
    fn parse(raw: &str) -> Result<Self, Problem> {
        raw.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
            Problem::bad_request("id", format!("id must be a job number (got {raw:?})"))
        })
    }
}

/// The `{id}` of a route: a UUID, or a job's number (400 naming `id` otherwise).
pub struct Id<T: PathId = Uuid>(pub T);

impl<S: Send + Sync, T: PathId> FromRequestParts<S> for Id<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, s: &S) -> Result<Self, Problem> {
        let Path(raw) = Path::<String>::from_request_parts(parts, s)
            .await
            .map_err(|e| Problem::bad_request("id", e.body_text()))?;
        T::parse(&raw).map(Id)
    }
}

/// The query of a list route that filters by a state of type `S`: a page and the state asked
/// for (400 naming the parameter otherwise).
pub struct Listing<S>(pub Page, pub Option<S>);

impl<St: Send + Sync, S: State> FromRequestParts<St> for Listing<S> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, s: &St) -> Result<Self, Problem> {
        let Params(q) = Params::<ListQuery>::from_request_parts(parts, s).await?;
        let (page, status) = q.checked()?;
        Ok(Listing(page, status))
    }
}

/// In the OpenAPI document: the query parameters `limit`, `cursor` and `status` (one of the
/// states of `S`), as [`ListQuery`] reads them.
impl<S: State + utoipa::PartialSchema> utoipa::IntoParams for Listing<S> {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let mut params = page_params();
        params.push(query_param(
            "status",
            "Only items in this state",
            S::schema(),
        ));
        params
    }
}

/// The query of a list route without a state filter (`GET /v1/tags`): a page (400 naming the
/// parameter otherwise).
pub struct Paging(pub Page);

/// Query of [`Paging`].
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    limit: Option<i64>,
    cursor: Option<String>,
}

impl<St: Send + Sync> FromRequestParts<St> for Paging {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, s: &St) -> Result<Self, Problem> {
        let Params(q) = Params::<PageQuery>::from_request_parts(parts, s).await?;
        Ok(Paging(Page::new(q.limit, q.cursor.as_deref())?))
    }
}

/// In the OpenAPI document: `limit` and `cursor`.
impl utoipa::IntoParams for Paging {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        page_params()
    }
}

/// A query parameter (never required) of the OpenAPI document.
pub fn query_param(name: &str, description: &str, schema: RefOr<Schema>) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(schema))
        .build()
}

/// `limit` and `cursor` of the keyset-paged list routes, as [`Page::new`] checks them.
pub fn page_params() -> Vec<Parameter> {
    let limit = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
        .minimum(Some(1))
        .maximum(Some(MAX_LIMIT))
        .default(Some(DEFAULT_LIMIT.into()));
    let cursor = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(CURSOR_PATTERN));
    vec![
        query_param(
            "limit",
            &format!("Items per page, 1–{MAX_LIMIT} (default {DEFAULT_LIMIT})"),
            limit.into(),
        ),
        query_param(
            "cursor",
            "`next_cursor` of the previous page, unchanged (others are 400)",
            cursor.into(),
        ),
    ]
}

/// `limit` and `cursor` of `GET /v1/jobs`, as [`JobPage::new`] checks them: [`page_params`]
/// with the pattern of a job cursor.
pub fn job_page_params() -> Vec<Parameter> {
    let mut params = page_params();
    let cursor = ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(JOB_CURSOR_PATTERN));
    params[1] = query_param(
        "cursor",
        "`next_cursor` of the previous page, unchanged (others are 400)",
        cursor.into(),
    );
    params
}

/// Query of the list routes that filter by state (`GET /v1/documents`, `/v1/approvals`,
/// `/v1/suggestions`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1–200 (default 50).
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only items in this state (the route's description names the states).
    pub status: Option<String>,
}

impl ListQuery {
    /// The page and the state filter, checked in that order (400 naming the bad parameter).
    pub fn checked<S: State>(&self) -> Result<(Page, Option<S>), Problem> {
        let page = Page::new(self.limit, self.cursor.as_deref())?;
        Ok((page, state(self.status.as_deref())?))
    }
}

/// A `status` parameter as a state of type `S` (400 naming the states otherwise).
pub fn state<S: State>(status: Option<&str>) -> Result<Option<S>, Problem> {
    status
        .map(str::parse)
        .transpose()
        .map_err(|e| Problem::bad_request("status", format!("status {e}")))
}

/// The `limit` and `cursor` of list routes.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub limit: i64,
    pub after: Option<(DateTime<Utc>, Uuid)>,
}

/// Default and largest page size.
pub const DEFAULT_LIMIT: i64 = 50;
/// Largest page size.
pub const MAX_LIMIT: i64 = 200;

impl Page {
    /// Validates `limit` (1..=200, default 50) and decodes `cursor`.
    pub fn new(limit: Option<i64>, cursor: Option<&str>) -> Result<Self, Problem> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(Problem::bad_request(
                "limit",
                format!("limit must be between 1 and {MAX_LIMIT} (got {limit})"),
            ));
        }
        let after = match cursor {
            None => None,
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                Problem::bad_request(
                    "cursor",
                    "cursor is not one this API returned; pass next_cursor from a previous page unchanged",
                )
            })?),
        };
        Ok(Self { limit, after })
    }
}

/// The opaque cursor after an item: lowercase hex of `<unix micros>.<uuid>`.
pub fn encode_cursor(created_at: DateTime<Utc>, id: Uuid) -> String {
    hex::encode(format!("{}.{}", created_at.timestamp_micros(), id))
}

/// What a cursor looks like (the OpenAPI document's `pattern`): the hex of an integer without
/// leading zeros of at most 18 digits, `.`, and a hyphenated lowercase UUID. Exactly these
/// strings decode ([`decode_cursor`]), so the document and the server agree on every cursor.
pub const CURSOR_PATTERN: &str = "^(30|(2d)?3[1-9](3[0-9]){0,17})2e(3[0-9]|6[1-6]){8}2d(3[0-9]|6[1-6]){4}2d(3[0-9]|6[1-6]){4}2d(3[0-9]|6[1-6]){4}2d(3[0-9]|6[1-6]){12}$";

/// Most digits of a cursor's time (18: every such number of microseconds is a valid time).
const CURSOR_DIGITS: usize = 18;

fn decode_cursor(c: &str) -> Option<(DateTime<Utc>, Uuid)> {
    let raw = String::from_utf8(hex::decode(c).ok()?).ok()?;
    let (micros, id) = raw.split_once('.')?;
    if micros.trim_start_matches('-').len() > CURSOR_DIGITS {
        return None;
    }
    let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
    let id = Uuid::parse_str(id).ok()?;
    // Only the form `encode_cursor` writes (lowercase, no leading zeros, hyphenated).
    (encode_cursor(at, id) == c).then_some((at.max(EARLIEST_CURSOR_TIME), id))
}

/// A cursor's time is compared with `created_at` in PostgreSQL, whose timestamps begin in 4713
/// BC; a time earlier than year 1 (which a pattern-valid cursor may carry, e.g. from Schemathesis)
/// would be a database error. Raised to year 1: no row is older, so the page is the same (empty).
pub const EARLIEST_CURSOR_TIME: DateTime<Utc> = match DateTime::from_timestamp(-62_135_596_800, 0) {
    Some(t) => t,
    None => DateTime::UNIX_EPOCH,
};

/// The `limit` and `cursor` of `GET /v1/jobs`: jobs are numbered, so its cursor is
/// `(created_at, id)` with the job's number.
#[derive(Debug, Clone, Copy)]
pub struct JobPage {
    pub limit: i64,
    pub after: api_reads::JobAfter,
}

/// What a job cursor looks like: the hex of `<unix micros>.<job number>` (the time as in
/// [`CURSOR_PATTERN`], the number positive, without leading zeros, of at most 18 digits).
/// Exactly these strings decode ([`decode_job_cursor`]).
pub const JOB_CURSOR_PATTERN: &str = "^(30|(2d)?3[1-9](3[0-9]){0,17})2e3[1-9](3[0-9]){0,17}$";

impl JobPage {
    /// Validates `limit` (as [`Page::new`]) and decodes `cursor` (400 naming it otherwise).
    pub fn new(limit: Option<i64>, cursor: Option<&str>) -> Result<Self, Problem> {
        let Page { limit, .. } = Page::new(limit, None)?;
        let after = match cursor {
            None => None,
            Some(c) => Some(decode_job_cursor(c).ok_or_else(|| {
                Problem::bad_request(
                    "cursor",
                    "cursor is not one this API returned; pass next_cursor from a previous page unchanged",
                )
            })?),
        };
        Ok(Self { limit, after })
    }
}

/// The opaque cursor after a job: lowercase hex of `<unix micros>.<id>`.
pub fn encode_job_cursor(created_at: DateTime<Utc>, id: i64) -> String {
    hex::encode(format!("{}.{id}", created_at.timestamp_micros()))
}

fn decode_job_cursor(c: &str) -> Option<(DateTime<Utc>, i64)> {
    let raw = String::from_utf8(hex::decode(c).ok()?).ok()?;
    let (micros, id) = raw.split_once('.')?;
    if micros.trim_start_matches('-').len() > CURSOR_DIGITS || id.len() > CURSOR_DIGITS {
        return None;
    }
    let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
    let id: i64 = id.parse().ok().filter(|n| *n > 0)?;
    (encode_job_cursor(at, id) == c).then_some((at.max(EARLIEST_CURSOR_TIME), id))
}

/// A page of items and the cursor of the next page (None: this was the last).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Paged<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T: Listed> Paged<T> {
    /// The page of the org's `T` (only `state`, and `kind` where `T` has kinds): one row more
    /// than the page is read, which only says there is a next page.
    pub async fn fetch(
        pool: &sqlx::PgPool,
        org_id: Uuid,
        page: &Page,
        state: Option<T::State>,
        kind: Option<&str>,
    ) -> Result<Self, Problem> {
        let kind = kind.zip(T::KIND).map(|(k, column)| (column, k));
        Self::fetch_where(pool, org_id, page, state, kind.as_slice()).await
    }

    /// [`Paged::fetch`] with equality filters on `T`'s columns ([`api_reads::page_where`]).
    pub async fn fetch_where(
        pool: &sqlx::PgPool,
        org_id: Uuid,
        page: &Page,
        state: Option<T::State>,
        filters: &[(&'static str, &str)],
    ) -> Result<Self, Problem> {
        let after = page.after;
        let mut rows: Vec<T> =
            api_reads::page_where(pool, org_id, state, filters, after, page.limit + 1).await?;
        let more = rows.len() as i64 > page.limit;
        rows.truncate(page.limit as usize);
        let next_cursor = rows.last().filter(|_| more).map(|r| {
            let (at, id) = r.key();
            encode_cursor(at, id)
        });
        Ok(Self {
            items: rows,
            next_cursor,
        })
    }
}

impl<T> Paged<T> {
    /// The same page with each item turned into what the route shows.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Paged<U> {
        Paged {
            items: self.items.into_iter().map(f).collect(),
            next_cursor: self.next_cursor,
        }
    }
}
