//! Each store scheme pointed at every other store's port, and at a port where nothing
//! listens: `connect` fails with an error that names the address and what answers there.
#![cfg(all(feature = "redis", feature = "postgres", feature = "mysql", feature = "etcd"))]

use std::time::Duration;

use distlock::LockError;
use distlock_conformance::kit;

/// A scheme under test: its backend name, the server kind as errors name it, and a URL of
/// its own server.
struct Scheme {
    backend: &'static str,
    kind: &'static str,
    url: String,
}

/// `(host, port)` of a URL `scheme://[userinfo@]host:port[/…]`.
fn host_port(url: &str) -> (String, u16) {
    let rest = &url[url.find("://").expect("a scheme") + 3..];
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = host_port.rsplit_once(':').expect("a port");
    (host.to_owned(), port.parse().expect("a numeric port"))
}

/// `url` with its port replaced by `port`.
fn with_port(url: &str, port: u16) -> String {
    let (host, old) = host_port(url);
    url.replacen(&format!("{host}:{old}"), &format!("{host}:{port}"), 1)
}

fn schemes() -> Option<Vec<Scheme>> {
    let test = "wrong server";
    Some(vec![
        Scheme { backend: "redis", kind: "a Redis server", url: kit::redis_url(test)? },
        Scheme { backend: "postgres", kind: "a PostgreSQL server", url: kit::postgres_url(test)? },
        Scheme { backend: "mysql", kind: "a MySQL/MariaDB server", url: kit::mysql_url(test)? },
        Scheme { backend: "etcd", kind: "an etcd server", url: kit::etcd_url(test)? },
    ])
}

/// The report of a failed `distlock::connect(url)` by a `backend` store.
async fn connect_failure(url: &str, backend: &str) -> String {
    let outcome = tokio::time::timeout(Duration::from_secs(60), distlock::connect(url)).await;
    let err = match outcome.unwrap_or_else(|_| panic!("{backend} connect to {url} hung")) {
        Ok(store) => panic!("{backend} connected to {url}: {}", store.backend()),
        Err(err) => err,
    };
    assert!(matches!(err, LockError::Store { backend: b, operation: "connect", .. } if b == backend), "{url}: {err:?}");
    err.report().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheme_names_the_server_it_found_at_another_stores_port() {
    let Some(schemes) = schemes() else { return };
    let mut checks = Vec::new();
    for this in &schemes {
        for other in schemes.iter().filter(|other| other.backend != this.backend) {
            let (host, port) = host_port(&other.url);
            let url = with_port(&this.url, port);
            let expected = format!("{host}:{port} is {}", other.kind);
            let not = format!("not {}", this.kind);
            let backend = this.backend;
            checks.push(tokio::spawn(async move {
                let report = connect_failure(&url, backend).await;
                assert!(report.contains(&expected) && report.contains(&not), "{backend} at {url}: {report}");
                println!("{backend} at {port}: {report}");
            }));
        }
    }
    for check in checks {
        check.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheme_names_a_refused_address() {
    let Some(schemes) = schemes() else { return };
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    for scheme in &schemes {
        let url = with_port(&scheme.url, port);
        let (host, _) = host_port(&url);
        let report = connect_failure(&url, scheme.backend).await;
        assert!(report.contains(&format!("connection to {host}:{port} refused")), "{}: {report}", scheme.backend);
    }
}
