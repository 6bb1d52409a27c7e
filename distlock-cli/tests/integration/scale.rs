//! The CLI on the scale-out Redis topologies, reached by URL scheme alone: Redlock over
//! three private masters.

use crate::common::{distlock, key, output, stderr, Running, NOT_ACQUIRED};
use distlock_conformance::kit::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread")]
async fn run_and_inspect_on_redlock() {
    let Some(first) = RedisServer::start_or_skip("distlock CLI on redlock://") else { return };
    let servers = [first, RedisServer::start(), RedisServer::start()];
    let hosts: Vec<String> = servers.iter().map(|server| format!("127.0.0.1:{}", server.port())).collect();
    let url = format!("redlock://{}?prefix=cli&fencing=true", hosts.join(","));
    let key = key("redlock");

    let mut holder = Running::start(&url, &["run", "--key", &key, "--", "sh", "-c", "echo ready; read line || true"]);
    assert_eq!(holder.line().await, "ready");
    let out = output(distlock(Some(&url), &["run", "--key", &key, "--no-wait", "--", "true"])).await;
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    let out = output(distlock(Some(&url), &["inspect", &key])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    holder.close_stdin();
    let (status, errors) = holder.finish().await;
    assert_eq!(status, 0, "{errors}");
    let out = output(distlock(Some(&url), &["run", "--key", &key, "--", "true"])).await;
    assert_eq!(out.status.code(), Some(0), "free again: {}", stderr(&out));
}

async fn run_twice_and_inspect(url: &str, name: &str) {
    let key = key(name);
    let mut holder = Running::start(url, &["run", "--key", &key, "--", "sh", "-c", "echo ready; read line || true"]);
    assert_eq!(holder.line().await, "ready");
    let out = output(distlock(Some(url), &["run", "--key", &key, "--no-wait", "--", "true"])).await;
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    let out = output(distlock(Some(url), &["inspect", &key])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    holder.close_stdin();
    let (status, errors) = holder.finish().await;
    assert_eq!(status, 0, "{errors}");
    let out = output(distlock(Some(url), &["run", "--key", &key, "--", "true"])).await;
    assert_eq!(out.status.code(), Some(0), "free again: {}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn run_and_inspect_on_a_cluster() {
    use distlock_conformance::kit::redis_cluster::RedisCluster;
    let Some(cluster) = tokio::task::block_in_place(|| RedisCluster::start_or_skip("distlock CLI on redis+cluster://"))
    else {
        return;
    };
    run_twice_and_inspect(&format!("{}?prefix=cli&fencing=true", cluster.url()), "cluster").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_and_inspect_through_sentinels() {
    use distlock_conformance::kit::redis_sentinel::RedisSentinels;
    let Some(set) = tokio::task::block_in_place(|| RedisSentinels::start_or_skip("distlock CLI on redis+sentinel://"))
    else {
        return;
    };
    run_twice_and_inspect(&format!("{}?prefix=cli", set.url()), "sentinel").await;
}
