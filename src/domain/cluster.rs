//! Which cluster a resource, or anything that happened to one, belongs
//! to: the name the cluster is configured under (`[[clusters]] name`, or
//! the one-cluster form's). The same host name in two clusters is two
//! agents; every key the fleet and the store hold starts with this.

use std::fmt;
use std::sync::Arc;

/// A configured cluster's name, cheap to clone onto every row.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterName(Arc<str>);

impl ClusterName {
    pub fn new(name: &str) -> ClusterName {
        ClusterName(Arc::from(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl serde::Serialize for ClusterName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ClusterName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(ClusterName::new(&s))
    }
}

/// No name: what a notice stored before clusters were named reads back as.
impl Default for ClusterName {
    fn default() -> ClusterName {
        ClusterName::new("")
    }
}

impl From<&str> for ClusterName {
    fn from(s: &str) -> ClusterName {
        ClusterName::new(s)
    }
}
