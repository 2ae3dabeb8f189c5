//! What a node needs to know of its cluster to join it: the name, the apiserver endpoint,
//! the CA, the service CIDR, and the Kubernetes version AMI aliases resolve for. The EC2
//! adapter writes these into the nodeadm NodeConfig;
//! [`crate::eks::EksAccess::cluster_info`] reads them from EKS.

/// EKS's default service CIDR, used when the cluster does not say (or an endpoint
/// override stands in for `DescribeCluster`).
pub const DEFAULT_SERVICE_CIDR: &str = "10.100.0.0/16";

/// A cluster as its nodes see it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The EKS cluster name.
    pub name: String,
    /// The apiserver's URL (`spec.cluster.apiServerEndpoint`).
    pub endpoint: String,
    /// The cluster CA's PEM, base64 (`spec.cluster.certificateAuthority`).
    pub ca_base64: String,
    /// The service CIDR (`spec.cluster.cidr`), e.g. `10.100.0.0/16`.
    pub service_cidr: String,
    /// The control plane's Kubernetes version (`major.minor`, DescribeCluster's
    /// `version`): AMI aliases resolve to images for it. `None` when unknown (an endpoint
    /// override stands in for DescribeCluster).
    pub kubernetes_version: Option<String>,
}

impl ClusterInfo {
    /// A cluster with these fields.
    pub fn new(
        name: impl Into<String>,
        endpoint: impl Into<String>,
        ca_base64: impl Into<String>,
        service_cidr: impl Into<String>,
    ) -> Self {
        ClusterInfo {
            name: name.into(),
            endpoint: endpoint.into(),
            ca_base64: ca_base64.into(),
            service_cidr: service_cidr.into(),
            kubernetes_version: None,
        }
    }

    /// The same cluster, with its control plane's Kubernetes version.
    pub fn with_kubernetes_version(mut self, version: impl Into<String>) -> Self {
        self.kubernetes_version = Some(version.into());
        self
    }
}

impl std::fmt::Debug for ClusterInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterInfo")
            .field("name", &self.name)
            .field("endpoint", &self.endpoint)
            .field("ca_base64_len", &self.ca_base64.len())
            .field("service_cidr", &self.service_cidr)
            .field("kubernetes_version", &self.kubernetes_version)
            .finish()
    }
}
