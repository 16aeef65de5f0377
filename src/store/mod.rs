//! All domain SQL lives here (sqlx), one file per table group. Every query filters by org.
