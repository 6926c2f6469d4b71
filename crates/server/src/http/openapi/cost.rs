//! The schema of one cost (`costs[i]`): a leaf the request bodies' schemas name.

use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use crate::config::MAX_COST;

/// A whole number of units from 0 to [`MAX_COST`] (1,000,000): an item of `costs`.
pub(crate) struct Cost;

impl utoipa::PartialSchema for Cost {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0))
            .maximum(Some(MAX_COST))
            .description(Some("A whole number of units from 0 to 1,000,000."))
            .into()
    }
}

impl ToSchema for Cost {}
