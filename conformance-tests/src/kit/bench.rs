//! Side-by-side benchmark rounds shared by the stores' benchmarks: variants (raw
//! commands, the store, the manager…) run back to back in rotating order, so load that
//! drifts during a run hits them alike, and results are reported as ratios to the first.

use std::future::Future;
use std::time::{Duration, Instant};

use distlock_api::{DynLockStore, LockKey, LockManager, Token, Ttl};

/// The median of `samples` (the upper one of an even count).
///
/// # Panics
///
/// When `samples` is empty.
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Runs `scenario` once per variant as a warm-up, then `rounds` times per variant,
/// rotating which variant goes first. Returns each variant's round durations in µs, in
/// the order of `variants`.
pub async fn interleaved_rounds<V, F, Fut>(variants: &[V], rounds: usize, scenario: F) -> Vec<Vec<f64>>
where
    V: Copy,
    F: Fn(V) -> Fut,
    Fut: Future<Output = ()>,
{
    for &variant in variants {
        scenario(variant).await;
    }
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    for round in 0..rounds {
        for i in 0..variants.len() {
            let index = (i + round) % variants.len();
            let started = Instant::now();
            scenario(variants[index]).await;
            samples[index].push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    samples
}

/// Prints each variant's median round divided by `per` (e.g. µs per cycle), and for every
/// variant after the first its ratio to the first: of the medians, and the median of the
/// per-round ratios (a round's variants ran back to back, under the same load). Returns
/// the per-`per` medians.
pub fn report_against_first(title: &str, unit: &str, per: f64, names: &[&str], samples: &[Vec<f64>]) -> Vec<f64> {
    let medians: Vec<f64> = samples.iter().map(|s| median(s.clone()) / per).collect();
    println!("{title}");
    let width = names.iter().map(|name| name.chars().count()).max().unwrap_or(0) + 1;
    for (i, (name, value)) in names.iter().zip(&medians).enumerate() {
        if i == 0 {
            println!("  {name:<width$}{value:9.2} {unit}");
        } else {
            let per_round = median(samples[i].iter().zip(&samples[0]).map(|(lib, base)| lib / base).collect());
            println!(
                "  {name:<width$}{value:9.2} {unit}   {:.3}× {} (median of per-round ratios {per_round:.3}×)",
                value / medians[0],
                names[0]
            );
        }
    }
    medians
}

/// `cycles` acquire + release cycles of `name` straight on `store`, with one fixed token:
/// the store's cost without the manager.
///
/// # Panics
///
/// On any store error, or when the key is not free.
pub async fn store_cycles(store: &DynLockStore, name: &str, ttl: Duration, cycles: usize) {
    let key = LockKey::new(name).expect("bench keys are valid").to_store_key();
    let token = Token::generate();
    let ttl = Ttl::new(ttl).expect("bench TTLs are valid");
    for _ in 0..cycles {
        assert!(store.try_acquire(&key, &token, ttl).await.expect("acquire").is_acquired());
        assert!(store.release(&key, &token).await.expect("release"));
    }
}

/// `cycles` `try_lock` + `release` cycles of `name` through `locks` (validation, a fresh
/// token per cycle, the handle).
///
/// # Panics
///
/// On any store error, or when the key is not free.
pub async fn manager_cycles(locks: &LockManager, name: &str, ttl: Duration, cycles: usize) {
    for _ in 0..cycles {
        let lock = locks.try_lock(name, ttl).await;
        assert!(lock.expect("lock").expect("free").release().await.expect("release"));
    }
}
