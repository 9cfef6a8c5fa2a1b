//! What a simulated Auth's `ListResources` page holds: the agents' nodes
//! in key order (less those the role hides), the registered OpenSSH hosts
//! after them, and each service kind's servers, a page and the key the
//! next one starts after.

use std::collections::HashSet;

use tonic::Status;

use super::shapes::{agentless, agentless_name, db, node, service_item, SimService};
use super::TeleportSpec;
use crate::cluster::State;
use lifeline::domain::Kind;
use lifeline::proto::teleport::auth::{self as tp, paginated_resource};
use lifeline::proto::v1 as pb;

/// The page of `resource_type` after the key `after`: `page` items at
/// most.
pub(super) fn page(
    st: &State,
    spec: &TeleportSpec,
    resource_type: &str,
    after: &str,
    page: usize,
) -> Result<tp::ListResourcesResponse, Status> {
    let peering = spec.proxy_peering;
    let room = (page + 1).min(st.servers.len() + st.services.len() + 1);
    let mut items = Page::with_capacity(room);
    match resource_type {
        "node" => {
            let hidden = spec.hidden_from_listing;
            let agents = st.servers.keys().filter(|(k, _)| *k == Kind::Agent);
            let hidden: HashSet<String> = agents.take(hidden).map(|(_, n)| n.clone()).collect();
            let mut proxies_of = st.proxies_in_order(after);
            for ((k, name), s) in st.servers.range((Kind::Agent, after.to_string())..) {
                if *k != Kind::Agent {
                    break;
                }
                if name == after || hidden.contains(name) {
                    continue;
                }
                let proxies = if peering {
                    proxies_of(name)
                } else {
                    Vec::new()
                };
                items.push(
                    name.clone(),
                    paginated_resource::Resource::Node(node(s, proxies)),
                );
                if items.len() > page {
                    break;
                }
            }
            for name in (0..spec.agentless_nodes).map(agentless_name) {
                if items.len() > page {
                    break;
                }
                if name.as_str() > after {
                    let node = agentless(&name);
                    items.push(name, paginated_resource::Resource::Node(node));
                }
            }
        }
        "app_server" => list_services(st, SimService::App, after, page, peering, &mut items),
        "db_server" => {
            let hosts: Vec<&pb::Server> = st
                .servers
                .iter()
                .filter(|((k, _), _)| *k == Kind::Agent)
                .map(|(_, s)| s)
                .collect();
            for (i, ca_bytes) in spec.db_servers.iter().enumerate() {
                let name = format!("db-{i:05}");
                if name.as_str() <= after && !after.is_empty() {
                    continue;
                }
                let Some(host) = hosts.get(i % hosts.len().max(1)) else {
                    break;
                };
                let proxies = if peering {
                    st.proxies_of(&host.name)
                } else {
                    Vec::new()
                };
                let r = db(host, &name, *ca_bytes, proxies);
                items.push(name, paginated_resource::Resource::DatabaseServer(r));
                if items.len() > page {
                    break;
                }
            }
            // Both sets, in key order, one more than a page at most.
            list_services(st, SimService::Db, after, page, peering, &mut items);
            items.order_by_key();
            items.truncate(page + 1);
        }
        "kube_server" => list_services(st, SimService::Kube, after, page, peering, &mut items),
        "windows_desktop_service" => {}
        "proxy" | "auth_server" => {
            return Err(Status::invalid_argument(format!(
                "resource type {:?} is not supported by ListResources",
                resource_type
            )))
        }
        other => {
            return Err(Status::invalid_argument(format!(
                "unknown resource type {other:?}"
            )))
        }
    }
    Ok(items.answer(page))
}

/// A `ListResources` page as it fills: each item with the key the next
/// page starts after, the items in the answer's own type from the start.
/// They are large (the oneof is the size of its largest member, 600 B)
/// and many (5 000 a page): each move of a page is megabytes copied.
struct Page {
    keys: Vec<String>,
    items: Vec<tp::PaginatedResource>,
}

impl Page {
    fn with_capacity(room: usize) -> Page {
        Page {
            keys: Vec::with_capacity(room),
            items: Vec::with_capacity(room),
        }
    }

    fn push(&mut self, key: String, resource: paginated_resource::Resource) {
        self.keys.push(key);
        self.items.push(tp::PaginatedResource {
            resource: Some(resource),
        });
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn truncate(&mut self, len: usize) {
        self.keys.truncate(len);
        self.items.truncate(len);
    }

    /// In key order (sets filled one after the other).
    fn order_by_key(&mut self) {
        let mut both: Vec<_> = std::mem::take(&mut self.keys)
            .into_iter()
            .zip(std::mem::take(&mut self.items))
            .collect();
        both.sort_by(|a, b| a.0.cmp(&b.0));
        (self.keys, self.items) = both.into_iter().unzip();
    }

    /// The answer: `page` items at most, and the key after which the next
    /// page starts when there is one (one more than a page was gathered).
    fn answer(mut self, page: usize) -> tp::ListResourcesResponse {
        let next_key = if self.len() > page {
            self.truncate(page);
            self.keys.pop().unwrap_or_default()
        } else {
            String::new()
        };
        tp::ListResourcesResponse {
            resources: self.items,
            next_key,
            total_count: 0,
        }
    }
}

/// The services of `kind` after the key `after`, up to one more than
/// `page` (which says that a next page exists).
fn list_services(
    st: &State,
    kind: SimService,
    after: &str,
    page: usize,
    peering: bool,
    items: &mut Page,
) {
    for ((k, host, name), expires) in &st.services {
        if *k != kind {
            continue;
        }
        // Past the big database servers' `db-NNNNN` keys.
        let key = format!("{host}/{name}");
        if !after.is_empty() && key.as_str() <= after {
            continue;
        }
        let proxies = if peering {
            st.proxies_of(host)
        } else {
            Vec::new()
        };
        if let Some(item) = service_item(kind, host, name, *expires, proxies) {
            items.push(key, item);
        }
        if items.len() > page {
            break;
        }
    }
}
