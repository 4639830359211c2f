//! Limiting llama.cpp's OpenMP threads for one decode, the only `unsafe` in hearth-engine.
//! ggml opens an OpenMP `parallel` region of the context's `n_threads` for every graph, and
//! llama-cpp-2 wraps no call that changes a context's thread count once created; the C shim
//! `csrc/thread_limit.c` runs a closure inside a host `teams` region whose `thread_limit`
//! caps those regions. Built on Linux with glibc (GCC's libgomp, as llama.cpp is there);
//! elsewhere the closure simply runs with the context's own threads.

#![allow(unsafe_code)]

/// Run `f` with llama.cpp's OpenMP regions inside it limited to `limit` threads (at least 1).
pub(crate) fn with_thread_limit<F: FnOnce() -> R, R>(limit: usize, f: F) -> R {
    imp::with_thread_limit(limit, f)
}

/// Whether this build can lower the thread count at all.
pub(crate) const SUPPORTED: bool = cfg!(hearth_omp);

#[cfg(hearth_omp)]
mod imp {
    use std::ffi::{c_int, c_void};
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

    extern "C" {
        /// `csrc/thread_limit.c`: calls `f(data)` once, on the calling thread, inside
        /// `#pragma omp teams num_teams(1) thread_limit(limit)`.
        fn hearth_with_thread_limit(
            limit: c_int,
            f: unsafe extern "C" fn(*mut c_void),
            data: *mut c_void,
        );
        /// OpenMP's thread-limit ICV of the calling task (tests check the shim with it).
        #[cfg(test)]
        fn omp_get_thread_limit() -> c_int;
    }

    /// The OpenMP thread limit in force on this thread.
    #[cfg(test)]
    pub(super) fn thread_limit() -> usize {
        // SAFETY: a plain OpenMP runtime query without arguments.
        usize::try_from(unsafe { omp_get_thread_limit() }).unwrap_or(0)
    }

    /// The closure and its result, passed through C as one pointer.
    struct Call<F, R> {
        f: Option<F>,
        result: Option<std::thread::Result<R>>,
    }

    /// Called by the shim with the pointer `with_thread_limit` gave it.
    unsafe extern "C" fn trampoline<F: FnOnce() -> R, R>(data: *mut c_void) {
        // SAFETY: `data` is the `&mut Call<F, R>` that `with_thread_limit` passed to the shim,
        // which calls this exactly once, synchronously, on the same thread, while that
        // borrow is alive and unused elsewhere.
        let call = unsafe { &mut *data.cast::<Call<F, R>>() };
        if let Some(f) = call.f.take() {
            // A panic must not unwind through C: it is caught here and resumed in Rust.
            call.result = Some(catch_unwind(AssertUnwindSafe(f)));
        }
    }

    pub(super) fn with_thread_limit<F: FnOnce() -> R, R>(limit: usize, f: F) -> R {
        let mut call = Call {
            f: Some(f),
            result: None,
        };
        let limit = c_int::try_from(limit.max(1)).unwrap_or(c_int::MAX);
        // SAFETY: the shim only calls `trampoline::<F, R>` with the pointer given, once,
        // before it returns; `call` outlives the call and has the type the trampoline expects.
        unsafe {
            hearth_with_thread_limit(
                limit,
                trampoline::<F, R>,
                std::ptr::from_mut(&mut call).cast(),
            );
        }
        match call.result {
            Some(Ok(r)) => r,
            Some(Err(panic)) => resume_unwind(panic),
            None => unreachable!("the OpenMP shim returned without running the closure"),
        }
    }
}

#[cfg(not(hearth_omp))]
mod imp {
    pub(super) fn with_thread_limit<F: FnOnce() -> R, R>(_limit: usize, f: F) -> R {
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closure_runs_once_and_its_result_and_panics_come_back() {
        let mut runs = 0;
        let r = with_thread_limit(1, || {
            runs += 1;
            41 + runs
        });
        assert_eq!((r, runs), (42, 1));
        let caught = std::panic::catch_unwind(|| with_thread_limit(1, || panic!("inside")));
        let message = caught.expect_err("the panic comes back to the caller");
        assert_eq!(message.downcast_ref::<&str>(), Some(&"inside"));
    }

    #[cfg(hearth_omp)]
    #[test]
    fn openmp_sees_the_limit_inside_and_none_after() {
        let outside = imp::thread_limit();
        assert!(outside > 2, "no limit outside: {outside}");
        assert_eq!(with_thread_limit(1, imp::thread_limit), 1);
        assert_eq!(with_thread_limit(3, imp::thread_limit), 3);
        assert_eq!(imp::thread_limit(), outside);
    }
}
