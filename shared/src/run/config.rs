//! The provisioner's configuration: environment variables, read once per cold start.

use std::time::Duration;

use crate::decide::provisioning::selector::Selector;

/// A variable that is missing or does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct ConfigError {
    /// The environment variable.
    pub variable: &'static str,
    /// What is wrong, and what is expected.
    pub message: String,
}

/// The provisioner's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `CARPOOL_CLUSTER_NAME`: the EKS cluster (required).
    pub cluster: String,
    /// `CARPOOL_TABLE_NAME`: the DynamoDB table (required).
    pub table: String,
    /// `CARPOOL_DEPLOYMENT` (default: the table's name): this deployment's name (the
    /// template passes the stack's). Every instance Carpool launches carries it as the
    /// `carpool.sh/deployment` tag, and housekeeping terminates only instances that carry
    /// it, so two deployments for one cluster, or a box tagged for the cluster by hand,
    /// are never terminated by this one.
    pub deployment: String,
    /// `AWS_REGION`: the region (set by Lambda; required).
    pub region: String,
    /// `CARPOOL_AMI_SSM_PARAMETER`: the SSM parameter holding the AL2023 AMI id, for
    /// EC2NodeClasses that select the AMI by alias when the cluster's Kubernetes version
    /// is unknown (an endpoint override stands in for DescribeCluster).
    pub ami_ssm_parameter: String,
    /// `CARPOOL_PUBLIC_SSM_ROOT` (default `/aws/service`): the root of AWS's public SSM
    /// parameters that AMI aliases resolve through (tests seed copies under another root,
    /// as no parameter can be created under `/aws/`).
    pub public_ssm_root: String,
    /// `CARPOOL_NODE_ROLE`: the node role the deployment made an instance profile for.
    pub node_role: Option<String>,
    /// `CARPOOL_NODE_INSTANCE_PROFILE`: that instance profile.
    pub node_instance_profile: Option<String>,
    /// `CARPOOL_WATCH_SECONDS` (default 50): how long a run watches for pods.
    pub watch: Duration,
    /// `CARPOOL_WATCH_MODE` (`continuous`, the default, or `adaptive`) and
    /// `CARPOOL_QUIET_AFTER_SECONDS` (default 600): whether a run with nothing pending,
    /// in a cluster where nothing was launched for that long, exits after one check
    /// ([`crate::run::watch_mode::WatchMode`]).
    pub watch_mode: crate::run::watch_mode::WatchMode,
    /// `CARPOOL_BATCH_IDLE_SECONDS` (default 1): a batch closes after this long without
    /// a new pod.
    pub batch_idle: Duration,
    /// `CARPOOL_BATCH_MAX_SECONDS` (default 10): a batch closes after this long at most.
    pub batch_max: Duration,
    /// `CARPOOL_REGISTRATION_TTL_SECONDS` (default 900): an instance whose node has not
    /// registered by then is terminated.
    pub registration_ttl: Duration,
    /// `CARPOOL_DRY_RUN` (default false): plan and log, launch nothing.
    pub dry_run: bool,
    /// `CARPOOL_WAVE_GRACE_SECONDS` (default 10): the nodes a batch launches register
    /// with a startup taint that Carpool removes from all of them together
    /// ([`crate::decide::waves::wave`]), once all are Ready or this long after the first is;
    /// 0 launches without it, and kube-scheduler uses each node as it registers.
    pub wave_grace: Duration,
    /// `CARPOOL_FIT_TO_SCHEDULER` (default true): replay kube-scheduler's default scoring
    /// (least-allocated) over each plan and grow the nodes where it would strand a pod
    /// ([`crate::decide::provisioning::scheduler_fit`]); false launches the plan as the planner made it
    /// (for a scheduler profile that scores otherwise, such as `MostAllocated`).
    pub fit_to_scheduler: bool,
    /// `CARPOOL_NODEPOOL_SELECTOR` (default empty: every NodePool): a label selector in
    /// `kubectl -l` syntax over the NodePools' labels; Carpool launches only for the
    /// NodePools it picks, so another autoscaler can keep the rest.
    pub nodepool_selector: Selector,
    /// `CARPOOL_LIVE_PRICES` (default true): read spot and on-demand prices and the
    /// offerings per zone from AWS (hourly); false keeps the embedded catalog's.
    pub live_prices: bool,
    /// `CARPOOL_LOG_LEVEL`, in `RUST_LOG` syntax; when unset, `AWS_LAMBDA_LOG_LEVEL` (the
    /// function's log level in Lambda's logging settings) lower-cased, else `info`.
    pub log_level: String,
    /// `CARPOOL_CLUSTER_ENDPOINT`: the API server URL, instead of DescribeCluster's (tests).
    pub cluster_endpoint: Option<String>,
    /// `CARPOOL_CLUSTER_CA_FILE`: a PEM file with the API server's CA, with the endpoint.
    pub cluster_ca_file: Option<String>,
    /// `CARPOOL_SERVICE_CIDR`: the service CIDR nodes get when DescribeCluster does not
    /// give one (with the endpoint override); default `10.100.0.0/16`, EKS's.
    pub service_cidr: Option<String>,
    /// The interruption function's drain deadline after an event's time
    /// (`CARPOOL_DRAIN_DEADLINE_SECONDS`, default 90, below 120: the spot notice is 2
    /// minutes).
    pub drain_deadline: Duration,
    /// The consolidator's wait before re-checking a command on a fresh snapshot
    /// (`CARPOOL_CONSOLIDATION_RECHECK_SECONDS`, default 15).
    pub consolidation_recheck: Duration,
    /// How long a consolidation's drain may stay blocked before it is rolled back
    /// (`CARPOOL_CONSOLIDATION_DRAIN_LIMIT_SECONDS`, default 900).
    pub consolidation_drain_limit: Duration,
    /// How long a node's Ready condition must be False or Unknown before the consolidator
    /// repairs it (`CARPOOL_REPAIR_AFTER_SECONDS`, default 1800; 0 turns repair off).
    pub repair_after: Duration,
}

/// The root of AWS's public SSM parameters.
pub const DEFAULT_PUBLIC_SSM_ROOT: &str = "/aws/service";

/// The default AMI parameter: EKS's recommended AL2023 x86_64 image for Kubernetes 1.35.
pub const DEFAULT_AMI_SSM_PARAMETER: &str =
    "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/standard/recommended/image_id";

fn required(get: &impl Fn(&str) -> Option<String>, variable: &'static str) -> Result<String, ConfigError> {
    match get(variable) {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(ConfigError {
            variable,
            message: "is required and not set".into(),
        }),
    }
}

fn optional(get: &impl Fn(&str) -> Option<String>, variable: &str) -> Option<String> {
    get(variable).map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn seconds(
    get: &impl Fn(&str) -> Option<String>,
    variable: &'static str,
    default: f64,
) -> Result<Duration, ConfigError> {
    let Some(text) = optional(get, variable) else {
        return Ok(Duration::from_secs_f64(default));
    };
    match text.parse::<f64>() {
        Ok(v) if (0.0..=86_400.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(ConfigError {
            variable,
            message: format!("{text:?} is not a number of seconds between 0 and 86400"),
        }),
    }
}

fn flag(get: &impl Fn(&str) -> Option<String>, variable: &'static str) -> Result<bool, ConfigError> {
    match optional(get, variable)
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("false" | "0" | "no") => Ok(false),
        Some("true" | "1" | "yes") => Ok(true),
        Some(other) => Err(ConfigError {
            variable,
            message: format!("{other:?} is not true or false"),
        }),
    }
}

/// `CARPOOL_WATCH_MODE` with `CARPOOL_QUIET_AFTER_SECONDS`.
fn watch_mode(get: &impl Fn(&str) -> Option<String>) -> Result<crate::run::watch_mode::WatchMode, ConfigError> {
    let quiet_after = seconds(
        get,
        "CARPOOL_QUIET_AFTER_SECONDS",
        crate::run::watch_mode::QUIET_AFTER.as_secs_f64(),
    )?;
    match optional(get, "CARPOOL_WATCH_MODE") {
        None => Ok(crate::run::watch_mode::WatchMode::Continuous),
        Some(text) => crate::run::watch_mode::WatchMode::parse(&text, quiet_after).map_err(|e| ConfigError {
            variable: "CARPOOL_WATCH_MODE",
            message: e.to_string(),
        }),
    }
}

/// A label selector variable; unset or empty is the selector that picks everything.
fn selector(get: &impl Fn(&str) -> Option<String>, variable: &'static str) -> Result<Selector, ConfigError> {
    Selector::parse(&optional(get, variable).unwrap_or_default()).map_err(|e| ConfigError {
        variable,
        message: e.to_string(),
    })
}

/// The log level, read on its own so that logging starts at it even when the rest of the
/// configuration is invalid (see [`Config::log_level`]).
fn log_level(get: &impl Fn(&str) -> Option<String>) -> String {
    optional(get, "CARPOOL_LOG_LEVEL")
        .or_else(|| optional(get, "AWS_LAMBDA_LOG_LEVEL").map(|l| l.to_ascii_lowercase()))
        .unwrap_or_else(|| "info".into())
}

/// The configuration as a cold start reads it: the log level in any case, and the rest or
/// what is wrong with it (to be logged at that level).
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigRead {
    /// The log level ([`Config::log_level`]).
    pub log_level: String,
    /// The configuration, with the same log level.
    pub config: Result<Config, ConfigError>,
}

impl Config {
    /// Reads the settings through `get` (the environment, in the function).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::read(get).config
    }

    /// Reads the log level, then the other settings, through `get`: each variable once.
    pub fn read(get: impl Fn(&str) -> Option<String>) -> ConfigRead {
        let log_level = log_level(&get);
        ConfigRead {
            config: Self::with_log_level(&get, log_level.clone()),
            log_level,
        }
    }

    fn with_log_level(get: &impl Fn(&str) -> Option<String>, log_level: String) -> Result<Self, ConfigError> {
        let cluster = required(&get, "CARPOOL_CLUSTER_NAME")?;
        let table = required(&get, "CARPOOL_TABLE_NAME")?;
        let config = Config {
            cluster,
            deployment: optional(&get, "CARPOOL_DEPLOYMENT").unwrap_or_else(|| table.clone()),
            table,
            region: required(&get, "AWS_REGION")?,
            ami_ssm_parameter: optional(&get, "CARPOOL_AMI_SSM_PARAMETER")
                .unwrap_or_else(|| DEFAULT_AMI_SSM_PARAMETER.to_string()),
            public_ssm_root: optional(&get, "CARPOOL_PUBLIC_SSM_ROOT")
                .unwrap_or_else(|| DEFAULT_PUBLIC_SSM_ROOT.to_string()),
            node_role: optional(&get, "CARPOOL_NODE_ROLE"),
            node_instance_profile: optional(&get, "CARPOOL_NODE_INSTANCE_PROFILE"),
            watch: seconds(&get, "CARPOOL_WATCH_SECONDS", 50.0)?,
            watch_mode: watch_mode(&get)?,
            batch_idle: seconds(&get, "CARPOOL_BATCH_IDLE_SECONDS", 1.0)?,
            batch_max: seconds(&get, "CARPOOL_BATCH_MAX_SECONDS", 10.0)?,
            registration_ttl: seconds(&get, "CARPOOL_REGISTRATION_TTL_SECONDS", 900.0)?,
            dry_run: flag(&get, "CARPOOL_DRY_RUN")?,
            wave_grace: seconds(&get, "CARPOOL_WAVE_GRACE_SECONDS", 10.0)?,
            fit_to_scheduler: optional(&get, "CARPOOL_FIT_TO_SCHEDULER").is_none()
                || flag(&get, "CARPOOL_FIT_TO_SCHEDULER")?,
            nodepool_selector: selector(&get, "CARPOOL_NODEPOOL_SELECTOR")?,
            live_prices: optional(&get, "CARPOOL_LIVE_PRICES").is_none() || flag(&get, "CARPOOL_LIVE_PRICES")?,
            log_level,
            cluster_endpoint: optional(&get, "CARPOOL_CLUSTER_ENDPOINT"),
            cluster_ca_file: optional(&get, "CARPOOL_CLUSTER_CA_FILE"),
            service_cidr: optional(&get, "CARPOOL_SERVICE_CIDR"),
            drain_deadline: seconds(&get, "CARPOOL_DRAIN_DEADLINE_SECONDS", 90.0)?,
            consolidation_recheck: seconds(&get, "CARPOOL_CONSOLIDATION_RECHECK_SECONDS", 15.0)?,
            consolidation_drain_limit: seconds(&get, "CARPOOL_CONSOLIDATION_DRAIN_LIMIT_SECONDS", 900.0)?,
            repair_after: seconds(&get, "CARPOOL_REPAIR_AFTER_SECONDS", 1800.0)?,
        };
        if config.drain_deadline >= Duration::from_secs(120) {
            return Err(ConfigError {
                variable: "CARPOOL_DRAIN_DEADLINE_SECONDS",
                message: format!(
                    "{} s is not before the end of the 2-minute spot notice: set it below 120 (default 90)",
                    config.drain_deadline.as_secs_f64()
                ),
            });
        }
        if config.batch_idle > config.batch_max {
            return Err(ConfigError {
                variable: "CARPOOL_BATCH_IDLE_SECONDS",
                message: format!(
                    "{:?} is longer than CARPOOL_BATCH_MAX_SECONDS ({:?})",
                    config.batch_idle, config.batch_max
                ),
            });
        }
        if config.node_role.is_some() != config.node_instance_profile.is_some() {
            return Err(ConfigError {
                variable: "CARPOOL_NODE_INSTANCE_PROFILE",
                message: "CARPOOL_NODE_ROLE and CARPOOL_NODE_INSTANCE_PROFILE are set together or not at all".into(),
            });
        }
        if config.cluster_endpoint.is_some() != config.cluster_ca_file.is_some() {
            return Err(ConfigError {
                variable: "CARPOOL_CLUSTER_CA_FILE",
                message: "CARPOOL_CLUSTER_ENDPOINT and CARPOOL_CLUSTER_CA_FILE are set together or not at all".into(),
            });
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    const BASE: &[(&str, &str)] = &[
        ("CARPOOL_CLUSTER_NAME", "prod"),
        ("CARPOOL_TABLE_NAME", "carpool"),
        ("AWS_REGION", "us-east-1"),
    ];

    #[test]
    fn the_defaults_are_karpenters_batching_and_a_fifteen_minute_registration_ttl() {
        let c = Config::from_vars(vars(BASE)).unwrap();
        assert_eq!(c.watch, Duration::from_secs(50));
        assert_eq!(c.batch_idle, Duration::from_secs(1));
        assert_eq!(c.batch_max, Duration::from_secs(10));
        assert_eq!(c.registration_ttl, Duration::from_secs(900));
        assert!(!c.dry_run);
        assert!(c.live_prices);
        assert_eq!(c.ami_ssm_parameter, DEFAULT_AMI_SSM_PARAMETER);
        assert_eq!(c.public_ssm_root, DEFAULT_PUBLIC_SSM_ROOT);
        assert_eq!(c.deployment, "carpool", "the deployment defaults to the table's name");
        let mut named = BASE.to_vec();
        named.push(("CARPOOL_DEPLOYMENT", "carpool-prod"));
        assert_eq!(Config::from_vars(vars(&named)).unwrap().deployment, "carpool-prod");
    }

    #[test]
    fn the_log_level_is_read_even_when_the_rest_is_invalid() {
        let read = Config::read(vars(&[("CARPOOL_LOG_LEVEL", "debug")]));
        assert_eq!(read.log_level, "debug");
        assert_eq!(read.config.unwrap_err().variable, "CARPOOL_CLUSTER_NAME");
        let read = Config::read(vars(&[("AWS_LAMBDA_LOG_LEVEL", "WARN")]));
        assert_eq!(read.log_level, "warn");
        let mut both = BASE.to_vec();
        both.extend([("CARPOOL_LOG_LEVEL", "carpool=trace"), ("AWS_LAMBDA_LOG_LEVEL", "WARN")]);
        let read = Config::read(vars(&both));
        assert_eq!(read.log_level, "carpool=trace");
        assert_eq!(read.config.unwrap().log_level, "carpool=trace");
        assert_eq!(Config::from_vars(vars(BASE)).unwrap().log_level, "info");
    }

    #[test]
    fn a_missing_or_bad_variable_is_an_error_naming_it() {
        let e = Config::from_vars(vars(&BASE[1..])).unwrap_err();
        assert_eq!(e.variable, "CARPOOL_CLUSTER_NAME");
        let mut bad = BASE.to_vec();
        bad.push(("CARPOOL_BATCH_MAX_SECONDS", "ten"));
        let e = Config::from_vars(vars(&bad)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CARPOOL_BATCH_MAX_SECONDS: \"ten\" is not a number of seconds between 0 and 86400"
        );
        let mut bad = BASE.to_vec();
        bad.push(("CARPOOL_DRY_RUN", "maybe"));
        assert_eq!(Config::from_vars(vars(&bad)).unwrap_err().variable, "CARPOOL_DRY_RUN");
        let mut bad = BASE.to_vec();
        bad.push(("CARPOOL_BATCH_IDLE_SECONDS", "20"));
        assert_eq!(
            Config::from_vars(vars(&bad)).unwrap_err().variable,
            "CARPOOL_BATCH_IDLE_SECONDS"
        );
    }

    #[test]
    fn a_nodepool_selector_that_does_not_parse_is_an_error_naming_the_variable() {
        let mut bad = BASE.to_vec();
        bad.push(("CARPOOL_NODEPOOL_SELECTOR", "team in web"));
        let e = Config::from_vars(vars(&bad)).unwrap_err();
        assert_eq!(e.variable, "CARPOOL_NODEPOOL_SELECTOR");
        let mut good = BASE.to_vec();
        good.push(("CARPOOL_NODEPOOL_SELECTOR", "carpool.sh/managed=true"));
        let c = Config::from_vars(vars(&good)).unwrap();
        assert_eq!(c.nodepool_selector, Selector::parse("carpool.sh/managed=true").unwrap());
        assert_eq!(
            Config::from_vars(vars(BASE)).unwrap().nodepool_selector,
            Selector::default()
        );
    }

    #[test]
    fn the_drain_deadline_must_end_before_the_two_minute_spot_notice() {
        let mut named = vec![
            ("CARPOOL_CLUSTER_NAME", "prod"),
            ("CARPOOL_TABLE_NAME", "carpool"),
            ("AWS_REGION", "us-east-1"),
        ];
        let ok = Config::from_vars(vars(&named)).unwrap();
        assert_eq!(ok.drain_deadline, Duration::from_secs(90));
        named.push(("CARPOOL_DRAIN_DEADLINE_SECONDS", "120"));
        let e = Config::from_vars(vars(&named)).unwrap_err();
        assert_eq!(e.variable, "CARPOOL_DRAIN_DEADLINE_SECONDS");
        assert!(e.message.contains("below 120"), "{e}");
    }
}
