//! The tower layers around our handlers: grace-period end, running count, the handler
//! adapter, and the abort-on-drop executor for `parallelize`.

#[allow(unused_imports)]
use super::*;

/// The backend's middleware (outermost): when the shutdown grace period is over, every
/// unfinished task future ends with [`Released`], dropping (and so aborting) its handler.
#[derive(Debug, Clone)]
pub struct GraceLayer {
    pub(super) grace_over: CancellationToken,
}

impl<S> Layer<S> for GraceLayer {
    type Service = GraceService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GraceService {
            inner,
            grace_over: self.grace_over.clone(),
        }
    }
}

/// See [`GraceLayer`].
#[derive(Debug, Clone)]
pub struct GraceService<S> {
    pub(super) inner: S,
    pub(super) grace_over: CancellationToken,
}

impl<S, Args> Service<Task<Args>> for GraceService<S>
where
    S: Service<Task<Args>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxDynError>,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = BoxFuture<'static, Result<S::Response, BoxDynError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<Args>) -> Self::Future {
        let grace_over = self.grace_over.clone();
        let fut = self.inner.call(task);
        async move {
            tokio::select! {
                biased;
                r = fut => r.map_err(Into::into),
                _ = grace_over.cancelled() => Err(Box::new(Released) as BoxDynError),
            }
        }
        .boxed()
    }
}

/// Counts running handlers (claims are sized to the free slots) and runs each job in a
/// `job` span. Sits under `parallelize`, so the count drops when the
/// spawned handler ends or is aborted.
#[derive(Clone)]
pub struct RunningLayer {
    pub(super) sh: Arc<Shared>,
}

impl<S> Layer<S> for RunningLayer {
    type Service = RunningService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RunningService {
            inner,
            sh: self.sh.clone(),
        }
    }
}

/// See [`RunningLayer`].
#[derive(Clone)]
pub struct RunningService<S> {
    pub(super) inner: S,
    pub(super) sh: Arc<Shared>,
}

pub(super) struct RunningGuard(Arc<Shared>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<S> Service<Task<ClaimedJob>> for RunningService<S>
where
    S: Service<Task<ClaimedJob>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxDynError>,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxDynError;
    type Future = BoxFuture<'static, Result<S::Response, BoxDynError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, task: Task<ClaimedJob>) -> Self::Future {
        let span = info_span!("job", id = task.args.id, kind = %task.args.kind, attempt = task.args.attempt);
        self.sh.running.fetch_add(1, Ordering::SeqCst);
        let guard = RunningGuard(self.sh.clone());
        let fut = self.inner.call(task);
        async move {
            let _guard = guard;
            fut.await.map_err(Into::into)
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
