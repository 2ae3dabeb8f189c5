//! Why an input is not an event Carpool can read.

/// An input, or one record of it, that cannot be read. A message with this error is
/// reported as a batch item failure, so that it ends in the dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The text is not JSON.
    #[error("not JSON: {message} at line {line} column {column}")]
    NotJson {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the JSON parser says.
        message: String,
    },
    /// The JSON is not an object.
    #[error("not a JSON object but {found}")]
    NotAnObject {
        /// The JSON type found: `an array`, `a string`, `a number`, `a boolean` or `null`.
        found: &'static str,
    },
    /// An object that lacks a field every EventBridge event has.
    #[error("not an EventBridge event: no `{missing}`")]
    NotAnEvent {
        /// The field: `id`, `detail-type`, `source` or `detail`.
        missing: &'static str,
    },
    /// An envelope field of the wrong type or form (e.g. `time` not ISO 8601).
    #[error("EventBridge envelope: `{path}`: {message}")]
    BadEnvelope {
        /// The field's path.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The `detail` of a kind Carpool handles does not have that kind's shape.
    #[error("{detail_type}: `{path}`: {message}")]
    BadDetail {
        /// The event's `detail-type`.
        detail_type: String,
        /// The path of the offending field, from the event's root (`detail.instance-id`).
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// An EC2 event of a handled kind that names no instance, in `detail` or `resources`.
    #[error("{detail_type}: no instance id in `detail.instance-id` or `resources`")]
    NoInstanceId {
        /// The event's `detail-type`.
        detail_type: String,
    },
    /// A Lambda SQS batch whose `Records` is not a list.
    #[error("SQS batch: `Records` is not a list but {found}")]
    BadBatch {
        /// The JSON type found.
        found: &'static str,
    },
    /// A record that is not an SQS message.
    #[error("SQS message: `{path}`: {message}")]
    BadSqsMessage {
        /// The offending field's path.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// An SQS message without a body.
    #[error("SQS message without a `body`")]
    MissingBody,
}

impl EventError {
    /// How to fix the input, for a person reading the error.
    pub fn how_to_fix(&self) -> &'static str {
        match self {
            EventError::NotJson { .. } | EventError::NotAnObject { .. } => {
                "give one EventBridge event, one SQS message or a Lambda SQS batch, as a JSON object"
            }
            EventError::NotAnEvent { .. } | EventError::BadEnvelope { .. } => {
                "an EventBridge event has string `id`, `detail-type`, `source`, an ISO 8601 `time` and an object `detail`"
            }
            EventError::BadDetail { .. } => {
                "the detail must have the shape AWS documents for this detail-type (see shared/tests/data/events)"
            }
            EventError::NoInstanceId { .. } => {
                "put the instance id in `detail.instance-id` or an instance ARN in `resources`"
            }
            EventError::BadBatch { .. } => {
                "a Lambda SQS batch is {\"Records\": [{\"messageId\": ..., \"body\": \"<event JSON>\"}]}"
            }
            EventError::BadSqsMessage { .. } | EventError::MissingBody => {
                "an SQS message has a string `messageId` and the event's JSON as the string `body`"
            }
        }
    }
}

/// The name of a JSON value's type, for errors.
pub(crate) fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

impl From<serde_json::Error> for EventError {
    fn from(e: serde_json::Error) -> Self {
        let (line, column) = (e.line(), e.column());
        let text = e.to_string();
        let message = text
            .strip_suffix(&format!(" at line {line} column {column}"))
            .unwrap_or(&text)
            .to_owned();
        EventError::NotJson { line, column, message }
    }
}
