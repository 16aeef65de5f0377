//! The tower layers around our handlers: grace-period end, running count, the handler
//! adapter, and the abort-on-drop executor for `parallelize`.

use super::backend::Shared;
use super::{JobToken, Released};
use crate::worker::{JobContext, JobHandler};
use crate::{ClaimedJob, JobError};
use ::apalis::layers::catch_panic::PanicError;
use apalis_core::error::BoxDynError;
use apalis_core::task::Task;
use futures::FutureExt;
use futures::future::BoxFuture;
use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};
use tracing::{Instrument, info_span};

/// A layer of ours: what it does around a task (an [`Around`]); [`AroundService`] is the
/// tower service it makes, written once for every such layer.
#[derive(Debug, Clone)]
pub struct AroundLayer<A>(pub(super) A);

impl<S, A: Clone> Layer<S> for AroundLayer<A> {
    type Service = AroundService<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        AroundService {
            inner,
            around: self.0.clone(),
        }
    }
}

/// What a layer does around a task: [`Around::before`] runs before the inner service takes
/// it, and [`Around::wrap`] turns the inner service's future into the one the task runs as.
pub trait Around<Args>: Clone {
    /// What `before` hands to `wrap`.
    type Before: Send + 'static;
    fn before(&self, task: &Task<Args>) -> Self::Before;
    fn wrap<R: Send + 'static>(before: Self::Before, fut: TaskFuture<R>) -> TaskFuture<R>;
}

/// A task's future inside our layers.
pub type TaskFuture<R> = BoxFuture<'static, Result<R, BoxDynError>>;

/// See [`AroundLayer`].
#[derive(Debug, Clone)]
pub struct AroundService<S, A> {
    pub(super) inner: S,
    pub(super) around: A,
}

impl<S, Args, A> Service<Task<Args>> for AroundService<S, A>
where
    S: Service<Task<Args>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxDynError>,
    S::Response: Send + 'static,
    A: Around<Args>,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = TaskFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<Args>) -> Self::Future {
        let before = self.around.before(&task);
        let fut = self.inner.call(task);
        A::wrap(before, async move { fut.await.map_err(Into::into) }.boxed())
    }
}

/// The backend's middleware (outermost): when the shutdown grace period is over, every
/// unfinished task future ends with [`Released`], dropping (and so aborting) its handler.
pub type GraceLayer = AroundLayer<Grace>;

/// See [`GraceLayer`].
#[derive(Debug, Clone)]
pub struct Grace {
    pub(super) grace_over: CancellationToken,
}

impl<Args> Around<Args> for Grace {
    type Before = CancellationToken;

    fn before(&self, _task: &Task<Args>) -> CancellationToken {
        self.grace_over.clone()
    }

    fn wrap<R: Send + 'static>(grace_over: CancellationToken, fut: TaskFuture<R>) -> TaskFuture<R> {
        async move {
            tokio::select! {
                biased;
                r = fut => r,
                _ = grace_over.cancelled() => Err(Box::new(Released) as BoxDynError),
            }
        }
        .boxed()
    }
}

/// Counts running handlers (claims are sized to the free slots) and runs each job in a
/// `job` span (in its producer's trace, `telemetry::propagation::continue_job`). Sits under `parallelize`, so the count drops when the
/// spawned handler ends or is aborted.
pub type RunningLayer = AroundLayer<Running>;

/// See [`RunningLayer`].
#[derive(Clone)]
pub struct Running {
    pub(super) sh: Arc<Shared>,
}

/// Counts a handler as running until dropped (also when its future is dropped or panics).
pub struct RunningGuard(Arc<Shared>, Instant);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Around<ClaimedJob> for Running {
    type Before = (tracing::Span, RunningGuard);

    fn before(&self, task: &Task<ClaimedJob>) -> Self::Before {
        let job = &task.args;
        // A root: the job's trace is its producer's (first attempt) or its own (a retry).
        let span =
            info_span!(parent: None, "job", id = job.id, kind = %job.kind, attempt = job.attempt);
        crate::telemetry::propagation::continue_job(&span, job.traceparent.as_deref(), job.attempt);
        self.sh.running.fetch_add(1, Ordering::SeqCst);
        (span, RunningGuard(self.sh.clone(), Instant::now()))
    }

    fn wrap<R: Send + 'static>((span, guard): Self::Before, fut: TaskFuture<R>) -> TaskFuture<R> {
        async move {
            let out = fut.await;
            // Only a job that succeeded says how long work takes: a burst of fast failures (a
            // provider outage failing agent runs in microseconds) must not make an automatic
            // prefetch buffer hundreds of agent jobs this worker would then sit on.
            if out.is_ok() {
                guard.0.record_duration(guard.1.elapsed());
            }
            drop(guard);
            out
        }
        .instrument(span)
        .boxed()
    }
}

/// Our [`JobHandler`] as the apalis service.
#[derive(Clone)]
pub struct HandlerService {
    pub(super) handler: Arc<dyn JobHandler>,
}

impl HandlerService {
    pub fn new(handler: Arc<dyn JobHandler>) -> Self {
        Self { handler }
    }
}

impl Service<Task<ClaimedJob>> for HandlerService {
    type Response = ();
    type Error = JobError;
    type Future = BoxFuture<'static, Result<(), JobError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, task: Task<ClaimedJob>) -> Self::Future {
        let cancel = task
            .data()
            .get::<JobToken>()
            .map(|t| t.cancel.clone())
            .unwrap_or_default();
        let handler = self.handler.clone();
        let (job, _ctx) = task.take();
        async move { handler.handle(JobContext { job, cancel }).await }.boxed()
    }
}

pub(super) fn panic_error(p: &Box<dyn Any + Send>) -> PanicError {
    PanicError(
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into()),
    )
}

/// A spawned task that is aborted when this handle is dropped (apalis `parallelize` executor).
pub struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll_unpin(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `tokio::spawn`, but dropping the handle cancels the task.
pub fn spawn_abort_on_drop<F>(fut: F) -> AbortOnDrop<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    AbortOnDrop(tokio::spawn(fut))
}
