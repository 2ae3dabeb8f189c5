//! The interruption queue's policy, read from template.yaml: only the stack's four
//! EventBridge rules may send to it. An Allow for them is not enough (in the same account,
//! a principal whose own IAM policy grants `sqs:SendMessage` could send a forged spot
//! warning), so the policy must hold a Deny of `SendMessage` to every principal whose
//! request does not come from one of the rules, and must deny nothing the function's own
//! consumption needs. `scripts/check-deploy cfn-lint` checks the same template's syntax.

use serde_yaml_ng::Value;

fn template() -> Value {
    let path = format!("{}/../../template.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // CloudFormation's short-form tags (!GetAtt, !Ref, !Sub) read as tagged values.
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A `!GetAtt X.Arn` (or a `Fn::GetAtt`) as `X.Arn`.
fn get_att(v: &Value) -> Option<String> {
    match v {
        Value::Tagged(t) if t.tag == "GetAtt" => t.value.as_str().map(str::to_owned),
        Value::Mapping(m) => m.get("Fn::GetAtt").and_then(|a| match a {
            Value::Sequence(s) => Some(format!("{}.{}", s.first()?.as_str()?, s.get(1)?.as_str()?)),
            Value::String(s) => Some(s.clone()),
            _ => None,
        }),
        _ => None,
    }
}

/// A value or a list of values, as a list.
fn list(v: &Value) -> Vec<Value> {
    match v {
        Value::Sequence(s) => s.clone(),
        Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}

/// The statements of the queue policy that governs `InterruptionQueue`.
fn queue_statements(template: &Value) -> Vec<Value> {
    let resources = template["Resources"].as_mapping().expect("Resources");
    let policies: Vec<&Value> = resources
        .values()
        .filter(|r| r["Type"].as_str() == Some("AWS::SQS::QueuePolicy"))
        .filter(|r| {
            list(&r["Properties"]["Queues"]).iter().any(|q| match q {
                Value::Tagged(t) => t.tag == "Ref" && t.value.as_str() == Some("InterruptionQueue"),
                _ => false,
            })
        })
        .collect();
    assert_eq!(policies.len(), 1, "one policy on InterruptionQueue");
    list(&policies[0]["Properties"]["PolicyDocument"]["Statement"])
}

/// The logical ids of the template's EventBridge rules with an event pattern.
fn rules(template: &Value) -> Vec<String> {
    let mut rules: Vec<String> = template["Resources"]
        .as_mapping()
        .expect("Resources")
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Events::Rule") && !r["Properties"]["EventPattern"].is_null())
        .filter_map(|(k, _)| k.as_str().map(|k| format!("{k}.Arn")))
        .collect();
    rules.sort();
    rules
}

fn actions(statement: &Value) -> Vec<String> {
    list(&statement["Action"])
        .iter()
        .filter_map(|a| a.as_str().map(str::to_ascii_lowercase))
        .collect()
}

#[test]
fn the_interruption_queue_denies_every_sender_but_the_stacks_rules() {
    let template = template();
    let rules = rules(&template);
    assert_eq!(rules.len(), 4, "{rules:?}");
    let statements = queue_statements(&template);
    let denies_send: Vec<&Value> = statements
        .iter()
        .filter(|s| s["Effect"].as_str() == Some("Deny"))
        .filter(|s| actions(s).iter().any(|a| a == "sqs:sendmessage" || a == "sqs:*"))
        .filter(|s| s["Condition"].get("ArnNotEquals").is_some() || s["Condition"].get("ArnNotLike").is_some())
        .collect();
    assert_eq!(
        denies_send.len(),
        1,
        "one Deny of SendMessage on aws:SourceArn: {statements:?}"
    );
    let deny = denies_send[0];
    // To every principal: the same-account IAM grants are what it must override.
    assert_eq!(deny["Principal"].as_str(), Some("*"), "{deny:?}");
    let condition = &deny["Condition"];
    let arns = condition
        .get("ArnNotEquals")
        .or_else(|| condition.get("ArnNotLike"))
        .and_then(|c| c.get("aws:SourceArn"))
        .expect("the Deny is conditioned on aws:SourceArn");
    let mut allowed: Vec<String> = list(arns).iter().filter_map(get_att).collect();
    allowed.sort();
    assert_eq!(allowed, rules, "the Deny exempts exactly the stack's rules");
    // No other condition key would let a request without aws:SourceArn through (keys of
    // one operator are ANDed, and operators too: an extra key narrows the Deny).
    let keys: usize = condition
        .as_mapping()
        .map(|m| m.values().filter_map(Value::as_mapping).map(|c| c.len()).sum())
        .unwrap_or(0);
    assert_eq!(keys, 1, "{condition:?}");
}

#[test]
fn the_queue_policy_denies_nothing_the_function_needs_to_consume() {
    let template = template();
    let consume = [
        "sqs:receivemessage",
        "sqs:deletemessage",
        "sqs:changemessagevisibility",
        "sqs:getqueueattributes",
    ];
    for s in queue_statements(&template) {
        if s["Effect"].as_str() != Some("Deny") {
            continue;
        }
        // The HTTP Deny covers everything, over plain HTTP only.
        if s["Condition"]["Bool"]["aws:SecureTransport"].is_bool()
            || s["Condition"]["Bool"]["aws:SecureTransport"].is_string()
        {
            continue;
        }
        for a in actions(&s) {
            assert!(
                !consume.contains(&a.as_str()) && a != "sqs:*",
                "a Deny of {a} would stop the function's role: {s:?}"
            );
        }
    }
    // And the role still has its own grant.
    let role = &template["Resources"]["InterruptionRole"]["Properties"]["Policies"];
    let granted: Vec<String> = list(role)
        .iter()
        .flat_map(|p| list(&p["PolicyDocument"]["Statement"]))
        .filter(|s| s["Sid"].as_str() == Some("ConsumeOwnQueue"))
        .flat_map(|s| actions(&s))
        .collect();
    for a in consume {
        assert!(granted.iter().any(|g| g == a), "{a} not granted: {granted:?}");
    }
}

/// Every mapping in `v`, at any depth (statements sit inside `!If`s too).
fn mappings(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Mapping(m) => {
            out.push(v.clone());
            m.values().for_each(|x| mappings(x, out));
        }
        Value::Sequence(s) => s.iter().for_each(|x| mappings(x, out)),
        Value::Tagged(t) => mappings(&t.value, out),
        _ => {}
    }
}

/// Issue 41, item 6: the stack could pass any role tagged `carpool.sh/cluster`, and it
/// tags its own three function roles that way, so an EC2NodeClass naming a function's
/// role gave nodes the functions' permissions. `iam:PassRole` is scoped to roles named
/// by the stack (the node role, and the operator's `ExtraNodeRoleArns`), never by a tag
/// or a wildcard.
#[test]
fn pass_role_names_its_roles_and_never_trusts_a_tag_or_a_wildcard() {
    let mut all = Vec::new();
    mappings(&template()["Resources"], &mut all);
    let pass: Vec<&Value> = all
        .iter()
        .filter(|s| actions(s).iter().any(|a| a == "iam:passrole"))
        .collect();
    assert!(
        pass.len() >= 2,
        "the node role's and the listed roles' statements: {pass:?}"
    );
    for s in pass {
        let text = serde_yaml_ng::to_string(s).unwrap();
        assert!(!text.contains("aws:ResourceTag"), "PassRole by a tag: {text}");
        assert!(!text.contains("role/*"), "PassRole on every role: {text}");
        assert!(text.contains("iam:PassedToService"), "PassRole to any service: {text}");
    }
}
