/* Run fn(data) with every OpenMP `parallel` region opened inside it limited to `limit`
 * threads. ggml opens one `parallel` region per graph with num_threads(n_threads) and
 * llama-cpp-2 cannot change a context's n_threads after creation; a host `teams` region
 * (OpenMP 5.0) with thread_limit caps those regions without touching the context.
 * Used by crates/engine/src/omp.rs when other programs keep cores busy. */
void hearth_with_thread_limit(int limit, void (*fn)(void *), void *data)
{
#pragma omp teams num_teams(1) thread_limit(limit)
    fn(data);
}
