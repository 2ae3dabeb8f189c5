//! The EC2 instance ids an event names, from `detail`, `resources` or Health's
//! `affectedEntities`.
//!
//! A value names an instance when it is a bare id (`i-` and letters or digits) or an
//! instance ARN, whose last `:`-separated part is `instance/<id>`. That covers the AWS
//! docs' `arn:aws:ec2:<region>:<account>:instance/<id>`, the form in
//! aws-node-termination-handler's examples with a zone in the region slot and no account
//! (`arn:aws:ec2:us-east-1b:instance/<id>`), and the other partitions (`aws-cn`,
//! `aws-us-gov`). Other values (a rule ARN, a volume) name no instance.

/// The instance id `value` names, if any.
pub fn instance_id(value: &str) -> Option<&str> {
    let value = value.trim();
    if is_instance_id(value) {
        return Some(value);
    }
    let rest = value.strip_prefix("arn:")?;
    let mut parts = rest.split(':');
    let _partition = parts.next()?;
    if parts.next()? != "ec2" {
        return None;
    }
    let id = parts.next_back()?.strip_prefix("instance/")?;
    is_instance_id(id).then_some(id)
}

/// Whether `id` has the form of an EC2 instance id.
pub fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-")
        .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The instance ids of `values`, in order, each once.
pub fn collect<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for id in values.into_iter().filter_map(instance_id) {
        if !ids.iter().any(|known| known == id) {
            ids.push(id.to_owned());
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_arn_forms_and_a_bare_id_name_the_instance() {
        assert_eq!(
            instance_id("arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"),
            Some("i-0123456789abcdef0")
        );
        // aws-node-termination-handler, pkg/monitor/sqsevent/spot-itn-event.go, example event.
        assert_eq!(
            instance_id("arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0"),
            Some("i-0b662ef9931388ba0")
        );
        assert_eq!(
            instance_id("arn:aws-us-gov:ec2:us-gov-west-1:123456789012:instance/i-0abc"),
            Some("i-0abc")
        );
        assert_eq!(instance_id("i-0123456789abcdef0"), Some("i-0123456789abcdef0"));
    }

    #[test]
    fn other_resources_name_no_instance() {
        for value in [
            "arn:aws:events:us-east-1:123456789012:rule/autoscaler-reconcile-tick",
            "arn:aws:ec2:us-east-1:123456789012:volume/vol-0123",
            "arn:aws:s3:::instance/i-0123",
            "arn:aws:ec2:us-east-1:123456789012:instance/",
            "instance/i-0123",
            "i-",
            "i-01/23",
            "",
            "arn:",
        ] {
            assert_eq!(instance_id(value), None, "{value}");
        }
    }

    #[test]
    fn ids_are_kept_in_order_once_each() {
        let ids = collect([
            "i-b",
            "arn:aws:ec2:us-east-1:123456789012:instance/i-a",
            "arn:aws:ec2:us-east-1b:instance/i-b",
            "i-a",
        ]);
        assert_eq!(ids, ["i-b", "i-a"]);
    }
}
