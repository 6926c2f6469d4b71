use super::*;
use crate::redis::testing::{current_thread_runtime, RedisServer};
use crate::CheckItem;
use floodgate_core::Policy;
use redis::aio::ConnectionManager;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

fn pending(key: &str) -> (Pending, oneshot::Receiver<Reply>) {
    let policy = Policy::new(AlgorithmKind::Gcra, "10/s".parse().expect("quota")).expect("fits");
    let mut item_args = Vec::new();
    let item = CheckItem {
        rule: "coalesce",
        policy: &policy,
        key,
        cost: 1,
    };
    super::super::reply::push_item_args(&mut item_args, 1, &item);
    let (tx, rx) = oneshot::channel();
    let p = Pending {
        keys: vec![key.to_string()],
        item_args,
        commit: true,
        now: None,
        kind: Some(AlgorithmKind::Gcra),
        tx,
    };
    (p, rx)
}

/// Polls `f` once.
async fn poll_once<F: Future>(mut f: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(f.as_mut().poll(cx))).await
}

/// A lone batch is sent from its caller's task; a batch that queued behind it while the
/// only slot was taken is still sent when that caller gives up mid-call (its future
/// dropped, as on a timeout), not left waiting for a sender that never comes.
#[test]
fn a_dropped_lone_caller_hands_its_queue_on() {
    let server = RedisServer::start().expect("redis-server");
    let rt = current_thread_runtime().expect("runtime");
    rt.block_on(async {
        let client = redis::Client::open(server.url()).expect("url");
        let manager = ConnectionManager::new(client).await.expect("connects");
        let coalescer = Arc::new(Coalescer::new(Conn::Single(manager), 0, 1));

        // Alone: decided from this task.
        let (p, rx) = pending("fgtest:lone");
        coalescer.submit(p).await;
        let reply = rx.await.expect("replied").expect("decided");
        assert_eq!(reply[0], 1, "admitted: {reply:?}");
        assert_eq!(coalescer.queue.lock().in_flight, 0);

        // A takes the only slot and waits for Redis; B queues behind it; A is dropped.
        let (a, _a_rx) = pending("fgtest:a");
        let mut a_call = Box::pin(coalescer.submit(a));
        // The first poll sends A and waits for the reply.
        assert!(
            poll_once(a_call.as_mut()).await.is_pending(),
            "A is in flight"
        );
        assert_eq!(coalescer.queue.lock().in_flight, 1);
        assert!(coalescer.queue.lock().waiting.is_empty(), "A was taken");
        let (b, b_rx) = pending("fgtest:b");
        let mut b_call = Box::pin(coalescer.submit(b));
        assert!(poll_once(b_call.as_mut()).await.is_ready(), "B only queues");
        assert_eq!(coalescer.queue.lock().waiting.len(), 1, "B queued");
        drop(a_call);
        let reply = tokio::time::timeout(Duration::from_secs(5), b_rx)
            .await
            .expect("B was sent")
            .expect("replied")
            .expect("decided");
        assert_eq!(reply[0], 1, "admitted: {reply:?}");
    });
}
