//! `GET /v1/schemas`, `/v1/prompts`, `/v1/tags`: what an upload with auto-create may start from
//! (`schema_id`, `prompt_id`, `tag_ids`), read-only, the key's org only, newest first in keyset
//! pages. A schema or prompt is listed once, as its latest version (the one an upload that
//! names it starts from).

use super::auth::Scoped;
use super::error::{ApiResult, ok};
use super::extract::{Listing, Paged, Paging};
use crate::store::api_reads::{PromptItem, SchemaItem, TagItem};
use crate::store::states::ArtifactStatus;

/// The org's schemas (latest version of each), newest first (`status`: of that version).
#[utoipa::path(get, path = "/v1/schemas", tag = "documents", operation_id = "listSchemas",
    params(Listing<ArtifactStatus>),
    responses((status = 200, body = Paged<SchemaItem>, description = "A page of schemas")))]
pub async fn schemas(req: Scoped, Listing(page, status): Listing<ArtifactStatus>) -> ApiResult {
    let paged = Paged::<SchemaItem>::fetch(&req.app.pool, req.org_id(), &page, status, None);
    ok(&paged.await?)
}

/// The org's prompts (latest version of each), newest first (`status`: of that version).
#[utoipa::path(get, path = "/v1/prompts", tag = "documents", operation_id = "listPrompts",
    params(Listing<ArtifactStatus>),
    responses((status = 200, body = Paged<PromptItem>, description = "A page of prompts")))]
pub async fn prompts(req: Scoped, Listing(page, status): Listing<ArtifactStatus>) -> ApiResult {
    let paged = Paged::<PromptItem>::fetch(&req.app.pool, req.org_id(), &page, status, None);
    ok(&paged.await?)
}

/// The org's tags, newest first.
#[utoipa::path(get, path = "/v1/tags", tag = "documents", operation_id = "listTags",
    params(Paging),
    responses((status = 200, body = Paged<TagItem>, description = "A page of tags")))]
pub async fn tags(req: Scoped, Paging(page): Paging) -> ApiResult {
    let paged = Paged::<TagItem>::fetch(&req.app.pool, req.org_id(), &page, None, None);
    ok(&paged.await?)
}
