//! Mapping EC2 failures to `CloudError`: SDK errors by their code, and the `errors` list of
//! an instant fleet that launched nothing to `InsufficientCapacity` naming the offerings.
//! The SDK's error (or the fleet's) stays the `CloudError`'s source.

use std::collections::BTreeSet;

use aws_sdk_ec2::config::http::HttpResponse;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_ec2::operation::create_fleet::CreateFleetError as CreateFleetCallError;
use aws_sdk_ec2::types::{CreateFleetError, InstanceLifecycle};
use carpool::model::CapacityType;
use carpool::ports::{BoxError, CloudError, OfferingKey};

/// Fleet error codes that mean "no capacity for this offering": the offering should be
/// marked unavailable and another one tried.
pub const CAPACITY_ERROR_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "MaxSpotInstanceCountExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "SpotMaxPriceTooLow",
    "VcpuLimitExceeded",
    "InstanceLimitExceeded",
    // The targeted capacity reservation is full (aws/karpenter-provider-aws
    // `pkg/errors` `reservationCapacityExceededErrorCode`, one of its unfulfillable
    // capacity codes): the reserved offering is unavailable, and the plan falls back.
    RESERVATION_CAPACITY_EXCEEDED,
];

/// The fleet error code of a launch into a capacity reservation with no room left.
pub const RESERVATION_CAPACITY_EXCEEDED: &str = "ReservationCapacityExceeded";

/// Codes that mean the caller was throttled.
const THROTTLE_CODES: &[&str] = &["RequestLimitExceeded", "Throttling", "ThrottlingException"];

/// Codes that mean the credentials may not do this.
const UNAUTHORIZED_CODES: &[&str] = &[
    "UnauthorizedOperation",
    "AuthFailure",
    "AccessDenied",
    "AccessDeniedException",
];

/// Codes that mean the instance does not exist.
pub const NOT_FOUND_CODES: &[&str] = &["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"];

/// One entry of an instant fleet's `errors` list, as an error.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct FleetError {
    /// The error code.
    pub code: String,
    /// The message.
    pub message: String,
}

impl From<&CreateFleetError> for FleetError {
    fn from(e: &CreateFleetError) -> Self {
        FleetError {
            code: e.error_code().unwrap_or("?").to_string(),
            message: e.error_message().unwrap_or_default().to_string(),
        }
    }
}

/// Maps an error code to a `CloudError` when the code says what it is, `what` naming the
/// call or the object, with `source` (the error) as its source; gives `source` back
/// otherwise.
fn by_code(code: &str, what: &str, source: BoxError) -> Result<CloudError, BoxError> {
    if THROTTLE_CODES.contains(&code) {
        Ok(CloudError::Throttled {
            what: format!("{what}: {code}"),
            source,
        })
    } else if UNAUTHORIZED_CODES.contains(&code) {
        Ok(CloudError::Unauthorized {
            what: format!("{what}: {code}"),
            source,
        })
    } else if NOT_FOUND_CODES.contains(&code) {
        Ok(CloudError::NotFound {
            id: what.to_string(),
            source: Some(source),
        })
    } else {
        Err(source)
    }
}

/// Maps an SDK error of an EC2 or SSM call; `what` names the call or the object.
pub fn map_sdk_err<E, R>(what: &str, e: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let code = e.code().unwrap_or_default().to_string();
    by_code(&code, what, Box::new(e)).unwrap_or_else(CloudError::Api)
}

/// Maps an error of the CreateFleet call itself. When the request may have reached EC2
/// and no answer says what it did, the outcome is unknown
/// ([`CloudError::OutcomeUnknown`]): a timeout, a failure while sending or reading
/// (the request may have been sent), a response that did not parse, or a 5xx (the SDK
/// has retried those with the same client token already). The launch record then stays in
/// flight and is resolved through the launch-id tag. Anything else is a refusal, mapped
/// as [`map_sdk_err`] does: nothing was launched.
pub fn map_launch_err(e: SdkError<CreateFleetCallError, HttpResponse>) -> CloudError {
    let unknown = match &e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        SdkError::ServiceError(_) => e.raw_response().is_some_and(|r| r.status().is_server_error()),
        _ => false,
    };
    if unknown {
        CloudError::OutcomeUnknown(Box::new(e))
    } else {
        map_sdk_err("CreateFleet", e)
    }
}

/// Whether a fleet error code means no capacity.
pub fn is_capacity_error(code: &str) -> bool {
    CAPACITY_ERROR_CODES.contains(&code)
}

/// What went wrong when an instant fleet launched no instance.
///
/// Capacity errors win: they become `InsufficientCapacity` naming each offering (type,
/// zone, capacity type) that failed, from the error's overrides, with `zone` and
/// `capacity_type` (the request's) where the error does not say. Otherwise the first
/// throttling or authorization error, otherwise `Api` with every message.
pub fn fleet_failure(errors: &[CreateFleetError], zone: &str, capacity_type: CapacityType) -> CloudError {
    let mut offerings = BTreeSet::new();
    for error in errors {
        let code = error.error_code().unwrap_or_default();
        if !is_capacity_error(code) {
            continue;
        }
        let overrides = error.launch_template_and_overrides().and_then(|l| l.overrides());
        let Some(instance_type) = overrides.and_then(|o| o.instance_type()) else {
            continue;
        };
        let capacity_type = match error.lifecycle() {
            // A reserved launch's errors say on-demand: the offering that failed is the
            // reservation's.
            _ if capacity_type == CapacityType::Reserved => CapacityType::Reserved,
            Some(InstanceLifecycle::Spot) => CapacityType::Spot,
            Some(InstanceLifecycle::OnDemand) => CapacityType::OnDemand,
            _ => capacity_type,
        };
        offerings.insert(OfferingKey {
            instance_type: instance_type.as_str().to_string(),
            zone: overrides
                .and_then(|o| o.availability_zone())
                .unwrap_or(zone)
                .to_string(),
            capacity_type,
        });
    }
    if !offerings.is_empty() {
        return CloudError::InsufficientCapacity {
            offerings: offerings.into_iter().collect(),
        };
    }
    for error in errors {
        let code = error.error_code().unwrap_or_default();
        let what = error.error_message().unwrap_or("CreateFleet");
        if let Ok(e) = by_code(code, what, Box::new(FleetError::from(error))) {
            return e;
        }
    }
    let messages: Vec<String> = errors
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.error_code().unwrap_or("?"),
                e.error_message().unwrap_or_default()
            )
        })
        .collect();
    if messages.is_empty() {
        CloudError::Api("CreateFleet launched no instance and reported no error".into())
    } else {
        CloudError::Api(format!("CreateFleet launched no instance: {}", messages.join("; ")).into())
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_ec2::types::{FleetLaunchTemplateOverrides, InstanceType, LaunchTemplateAndOverridesResponse};
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn response(status: u16) -> HttpResponse {
        HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty())
    }

    fn service_error(code: &str, status: u16) -> SdkError<CreateFleetCallError, HttpResponse> {
        let meta = ErrorMetadata::builder().code(code).message("m").build();
        SdkError::service_error(CreateFleetCallError::generic(meta), response(status))
    }

    #[test]
    fn a_create_fleet_call_that_may_have_launched_is_an_unknown_outcome() {
        let timeout: SdkError<CreateFleetCallError, HttpResponse> = SdkError::timeout_error("read timed out");
        assert!(map_launch_err(timeout).is_outcome_unknown());
        assert!(map_launch_err(service_error("InternalError", 500)).is_outcome_unknown());
        assert!(map_launch_err(service_error("Unavailable", 503)).is_outcome_unknown());
        let refused = map_launch_err(service_error("InvalidParameterValue", 400));
        assert!(matches!(refused, CloudError::Api(..)), "{refused:?}");
        let throttled = map_launch_err(service_error("RequestLimitExceeded", 400));
        assert!(matches!(throttled, CloudError::Throttled { .. }), "{throttled:?}");
        let unauthorized = map_launch_err(service_error("UnauthorizedOperation", 403));
        assert!(
            matches!(unauthorized, CloudError::Unauthorized { .. }),
            "{unauthorized:?}"
        );
    }

    fn error(
        code: &str,
        instance_type: &str,
        zone: Option<&str>,
        lifecycle: Option<InstanceLifecycle>,
    ) -> CreateFleetError {
        let mut overrides = FleetLaunchTemplateOverrides::builder().instance_type(InstanceType::from(instance_type));
        if let Some(zone) = zone {
            overrides = overrides.availability_zone(zone);
        }
        CreateFleetError::builder()
            .error_code(code)
            .error_message(format!("{code} for {instance_type}"))
            .set_lifecycle(lifecycle)
            .launch_template_and_overrides(
                LaunchTemplateAndOverridesResponse::builder()
                    .overrides(overrides.build())
                    .build(),
            )
            .build()
    }

    fn key(t: &str, zone: &str, c: CapacityType) -> OfferingKey {
        OfferingKey {
            instance_type: t.into(),
            zone: zone.into(),
            capacity_type: c,
        }
    }

    #[test]
    fn capacity_errors_name_every_failed_offering() {
        let errors = vec![
            error(
                "InsufficientInstanceCapacity",
                "m5.large",
                Some("us-east-1a"),
                Some(InstanceLifecycle::Spot),
            ),
            error("MaxSpotInstanceCountExceeded", "c5.large", None, None),
            error(
                "UnfulfillableCapacity",
                "m5.large",
                Some("us-east-1a"),
                Some(InstanceLifecycle::Spot),
            ),
        ];
        match fleet_failure(&errors, "us-east-1a", CapacityType::Spot) {
            CloudError::InsufficientCapacity { offerings } => assert_eq!(
                offerings,
                vec![
                    key("c5.large", "us-east-1a", CapacityType::Spot),
                    key("m5.large", "us-east-1a", CapacityType::Spot),
                ]
            ),
            other => panic!("expected InsufficientCapacity, got {other:?}"),
        }
    }

    /// aws/karpenter-provider-aws `pkg/errors` `IsReservationCapacityExceeded` and
    /// `pkg/providers/instance` `updateUnavailableOfferingsCache`: a full reservation is a
    /// capacity error, and the reserved offering is the one marked unavailable.
    #[test]
    fn a_full_reservation_marks_the_reserved_offering_unavailable() {
        let errors = vec![error(
            RESERVATION_CAPACITY_EXCEEDED,
            "m5.xlarge",
            Some("us-east-1a"),
            Some(InstanceLifecycle::OnDemand),
        )];
        match fleet_failure(&errors, "us-east-1a", CapacityType::Reserved) {
            CloudError::InsufficientCapacity { offerings } => {
                assert_eq!(offerings, vec![key("m5.xlarge", "us-east-1a", CapacityType::Reserved)]);
            }
            other => panic!("expected InsufficientCapacity, got {other:?}"),
        }
    }

    #[test]
    fn capacity_errors_take_the_errors_lifecycle_and_zone() {
        let errors = vec![error(
            "InsufficientFreeAddressesInSubnet",
            "r6i.xlarge",
            Some("us-east-1b"),
            Some(InstanceLifecycle::OnDemand),
        )];
        match fleet_failure(&errors, "us-east-1a", CapacityType::Spot) {
            CloudError::InsufficientCapacity { offerings } => {
                assert_eq!(offerings, vec![key("r6i.xlarge", "us-east-1b", CapacityType::OnDemand)]);
            }
            other => panic!("expected InsufficientCapacity, got {other:?}"),
        }
    }

    #[test]
    fn capacity_wins_over_other_errors() {
        let errors = vec![
            error("InvalidParameterValue", "m5.large", None, None),
            error("SpotMaxPriceTooLow", "m5.xlarge", None, None),
        ];
        assert!(matches!(
            fleet_failure(&errors, "us-east-1a", CapacityType::Spot),
            CloudError::InsufficientCapacity { offerings } if offerings == vec![key("m5.xlarge", "us-east-1a", CapacityType::Spot)]
        ));
    }

    #[test]
    fn throttling_and_authorization_errors_map_to_their_kinds() {
        let throttled = vec![error("RequestLimitExceeded", "m5.large", None, None)];
        assert!(matches!(
            fleet_failure(&throttled, "us-east-1a", CapacityType::Spot),
            CloudError::Throttled { .. }
        ));
        let unauthorized = vec![error("UnauthorizedOperation", "m5.large", None, None)];
        assert!(matches!(
            fleet_failure(&unauthorized, "us-east-1a", CapacityType::OnDemand),
            CloudError::Unauthorized { .. }
        ));
    }

    #[test]
    fn other_errors_and_no_errors_are_api_errors() {
        let other = vec![error(
            "InvalidLaunchTemplateName.NotFoundException",
            "m5.large",
            None,
            None,
        )];
        match fleet_failure(&other, "us-east-1a", CapacityType::Spot) {
            CloudError::Api(e) => assert!(e.to_string().contains("InvalidLaunchTemplateName"), "{e}"),
            other => panic!("expected Api, got {other:?}"),
        }
        assert!(matches!(
            fleet_failure(&[], "us-east-1a", CapacityType::Spot),
            CloudError::Api(_)
        ));
    }
}
