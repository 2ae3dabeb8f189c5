//! Reading Kubernetes objects from YAML or JSON with errors that name the field path.
//!
//! Structure and types are checked by serde (through `serde_path_to_error`, so a wrong
//! enum value reads `spec.template.spec.requirements[2].operator: unknown variant ...`);
//! values serde cannot judge are checked by each type's [`Validate`]. Unknown fields are
//! ignored, never an error: manifests written for newer Karpenter releases still load.

use serde::de::DeserializeOwned;

/// An object that does not deserialize or does not validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ManifestError {
    /// The field path, e.g. `spec.template.spec.requirements[2].operator`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ManifestError {
    /// An error at a field path.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ManifestError {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Checks an object's `apiVersion` and `kind` (either may be absent, as in a typed test
/// object): `api_version` must be `want_api` and `kind` `want_kind`; `hint` follows the
/// message of an unsupported version.
pub fn check_type_meta(
    api_version: &str,
    kind: &str,
    want_api: &str,
    want_kind: &str,
    hint: &str,
) -> Result<(), ManifestError> {
    if !api_version.is_empty() && api_version != want_api {
        return Err(ManifestError::at(
            "apiVersion",
            format!("{api_version:?} is not supported; Carpool reads {want_api}{hint}"),
        ));
    }
    if !kind.is_empty() && kind != want_kind {
        return Err(ManifestError::at(
            "kind",
            format!("expected {want_kind}, found {kind:?}"),
        ));
    }
    Ok(())
}

/// Semantic checks beyond what deserialization enforces.
pub trait Validate {
    /// The first invalid value, with its field path.
    fn validate(&self) -> Result<(), ManifestError>;
}

fn path_error<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> ManifestError {
    let path = e.path().to_string();
    let path = if path == "." { "(root)".to_string() } else { path };
    ManifestError::at(path, e.inner().to_string())
}

/// Reads and validates one object from YAML (which includes JSON).
pub fn from_yaml<T: DeserializeOwned + Validate>(text: &str) -> Result<T, ManifestError> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(de).map_err(path_error)?;
    value.validate()?;
    Ok(value)
}

/// Reads and validates one object from a parsed JSON value (e.g. an item of a `List`).
pub fn from_value<T: DeserializeOwned + Validate>(value: &serde_json::Value) -> Result<T, ManifestError> {
    let obj: T = serde_path_to_error::deserialize(value).map_err(path_error)?;
    obj.validate()?;
    Ok(obj)
}
