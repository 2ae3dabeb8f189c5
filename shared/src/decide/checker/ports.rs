//! Host ports, as kube-scheduler's NodePorts filter reads them (`nodeports`
//! `getContainerPorts`, `fitsPorts`, framework `HostPortInfo.CheckConflict`): the ports
//! with a `hostPort` of the pod's app containers; two collide when protocol (TCP by
//! default) and port are equal and their host IPs overlap (equal, or either is `0.0.0.0`
//! or unset).

/// A host port a pod binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HostPort {
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// The port.
    pub port: i32,
    /// The host IP (`0.0.0.0` when unset).
    pub ip: String,
}

impl HostPort {
    /// Whether two host ports collide.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.protocol == other.protocol
            && self.port == other.port
            && (self.ip == "0.0.0.0" || other.ip == "0.0.0.0" || self.ip == other.ip)
    }
}

/// The host ports of a pod spec.
pub(crate) fn of_spec(spec: &PodSpec) -> Vec<HostPort> {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|h| *h > 0)?;
            Some(HostPort {
                protocol: p
                    .protocol
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "TCP".into()),
                port,
                ip: p
                    .host_ip
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
            })
        })
        .collect()
}
use crate::model::pod::PodSpec;
