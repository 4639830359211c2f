//! Joining the split to the rest of this node: the route's auto-split of a model too large
//! for this machine, and the cluster's tunnels handed to `host`.

use std::sync::Arc;

use hearth_cluster::Context;

use crate::error::SplitError;
use crate::splits::{host, Splits};

/// Join the split to the rest of this node: the route splits a model too large for this
/// machine over the peers that share their memory when a request names it, and the cluster
/// hands the tunnels peers open to `host`.
pub fn attach(state: &Arc<Context>, splits: &Arc<Splits>) {
    let weak = Arc::downgrade(state);
    let own = splits.clone();
    state.router.set_auto_split(Box::new(move |id| {
        let (weak, splits) = (weak.clone(), own.clone());
        Box::pin(async move {
            let state = weak.upgrade().ok_or("the node is stopping")?;
            // A task of its own: a request that goes away does not leave a split half made.
            let started =
                tokio::spawn(async move { splits.start(&state, &id.0).await.map(|_| ()) });
            match started.await {
                Ok(Ok(())) | Ok(Err(SplitError::Already(_))) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(e) => Err(format!("the split stopped: {e}")),
            }
        })
    }));
    let own = splits.clone();
    state.serve_tunnels(Box::new(move |state, kind, tunnel| {
        let splits = own.clone();
        Box::pin(async move { host::serve(&splits, &state, &kind, tunnel).await })
    }));
}
