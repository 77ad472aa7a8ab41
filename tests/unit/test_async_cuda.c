/*
 * test_async_cuda.c - asynchronous save from CUDA device memory and load
 * back into device memory, compared element by element with a host
 * reference made before the save; the device buffers are overwritten
 * (cudaMemset) right after the save call returns.  Also a mix of host and
 * device pieces, a staging cap smaller than the state, and ckpt_load_batch
 * of device and host destinations together.
 *
 * Exits 77 (skipped, with a message) in a build without CUDA or where no
 * CUDA device is usable: the host-only path of the same build is what
 * test_async checks everywhere.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"   /* HAVE_CUDA */
#endif
#include <stdio.h>

#ifndef HAVE_CUDA
int main(void)
{
    printf("SKIP: libckptfs built without CUDA (configure --with-cuda)\n");
    return 77;
}
#else
#include <check.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "common/fileio.h"

#define R 1000
#define C 1500

static void fill(unsigned char *b, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        b[i] = (unsigned char)s;
    }
}

static void roundtrip(size_t cap)
{
    char tmp[] = "/tmp/ckpt-cuda-XXXXXX", dir[4096];
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    ck_assert_int_eq(ckpt_path_join(dir, sizeof dir, tmp, "step", NULL), 0);
    size_t nw = (size_t)R * C * 4, nb = 2 * 7000, nh = 4096;
    unsigned char *rw = malloc(nw), *rb = malloc(nb), *rh = malloc(nh);
    unsigned char *host = malloc(nh), *back = malloc(nw);
    fill(rw, nw, 1);
    fill(rb, nb, 2);
    fill(rh, nh, 3);
    memcpy(host, rh, nh);
    void *dw, *db, *lw;
    ck_assert_int_eq(cudaMalloc(&dw, nw), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&db, nb), cudaSuccess);
    ck_assert_int_eq(cudaMalloc(&lw, nw), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(dw, rw, nw, cudaMemcpyHostToDevice), 0);
    ck_assert_int_eq(cudaMemcpy(db, rb, nb, cudaMemcpyHostToDevice), 0);
    int64_t ws[2] = { R, C }, bs[1] = { 7000 }, hs[1] = { (int64_t)nh };
    ckpt_piece p[3] = {
        { "w", CKPT_F32, 2, ws, NULL, NULL, dw },
        { "b", CKPT_BF16, 1, bs, NULL, NULL, db },
        { "h", CKPT_U8, 1, hs, NULL, NULL, host },
    };
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    so.staging_bytes = cap;
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_saver_create(&sv, &so, &err), 0);
    ck_assert_int_eq(ckpt_saver_cuda(sv), 1);
    ckpt_save *h;
    ck_assert_msg(ckpt_save_async(sv, dir, p, 3, NULL, &h, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(cudaMemset(dw, 0xA5, nw), cudaSuccess);
    ck_assert_int_eq(cudaMemset(db, 0x5A, nb), cudaSuccess);
    memset(host, 0, nh);
    ck_assert_msg(ckpt_save_wait(h, &err) == 0, "%s", err.msg);
    ckpt_saver_destroy(sv);

    ckpt_reader *r;
    ck_assert_int_eq(ckpt_reader_open(&r, dir, NULL, &err), 0);
    /* Whole tensor into device memory. */
    ck_assert_int_eq(cudaMemset(lw, 0, nw), cudaSuccess);
    ck_assert_msg(ckpt_load_region(r, (size_t)ckpt_reader_find(r, "w"), NULL,
                                   NULL, lw, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(cudaMemcpy(back, lw, nw, cudaMemcpyDeviceToHost), 0);
    for (size_t i = 0; i < nw / 4; i++)
        if (memcmp(back + 4 * i, rw + 4 * i, 4))
            ck_abort_msg("w element %zu differs", i);
    /* A region into device memory. */
    int64_t off[2] = { 17, 5 }, sz[2] = { 900, 1001 };
    ck_assert_int_eq(ckpt_load_region(r, (size_t)ckpt_reader_find(r, "w"),
                                      off, sz, lw, &err), 0);
    ck_assert_int_eq(cudaMemcpy(back, lw, (size_t)900 * 1001 * 4,
                                cudaMemcpyDeviceToHost), 0);
    for (int64_t i = 0; i < 900; i++)
        for (int64_t j = 0; j < 1001; j++)
            if (memcmp(back + 4 * (size_t)(i * 1001 + j),
                       rw + 4 * (size_t)((17 + i) * C + 5 + j), 4))
                ck_abort_msg("region element (%lld, %lld) differs",
                             (long long)i, (long long)j);
    ck_assert_int_eq(ckpt_load_region(r, (size_t)ckpt_reader_find(r, "b"),
                                      NULL, NULL, lw, &err), 0);
    ck_assert_int_eq(cudaMemcpy(back, lw, nb, cudaMemcpyDeviceToHost), 0);
    ck_assert_mem_eq(back, rb, nb);
    ck_assert_int_eq(ckpt_load_region(r, (size_t)ckpt_reader_find(r, "h"),
                                      NULL, NULL, back, &err), 0);
    ck_assert_mem_eq(back, rh, nh);
    /* One batch: device and host destinations, a whole tensor, a region
     * and a second tensor packed into the same bounce buffer. */
    void *lb;
    ck_assert_int_eq(cudaMalloc(&lb, nb), cudaSuccess);
    ck_assert_int_eq(cudaMemset(lw, 0, nw), cudaSuccess);
    ck_assert_int_eq(cudaMemset(lb, 0, nb), cudaSuccess);
    unsigned char *hreg = calloc(1, (size_t)900 * 1001 * 4), *hh = calloc(1, nh);
    size_t iw = (size_t)ckpt_reader_find(r, "w");
    ckpt_read_item items[4] = {
        { iw, NULL, NULL, lw },
        { (size_t)ckpt_reader_find(r, "b"), NULL, NULL, lb },
        { iw, off, sz, hreg },
        { (size_t)ckpt_reader_find(r, "h"), NULL, NULL, hh },
    };
    ck_assert_msg(ckpt_load_batch(r, items, 4, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(cudaMemcpy(back, lw, nw, cudaMemcpyDeviceToHost), 0);
    ck_assert_mem_eq(back, rw, nw);
    ck_assert_int_eq(cudaMemcpy(back, lb, nb, cudaMemcpyDeviceToHost), 0);
    ck_assert_mem_eq(back, rb, nb);
    for (int64_t i = 0; i < 900; i++)
        ck_assert_mem_eq(hreg + 4 * (size_t)(i * 1001),
                         rw + 4 * (size_t)((17 + i) * C + 5), 1001 * 4);
    ck_assert_mem_eq(hh, rh, nh);
    /* A bad item after good ones: refused before anything is read. */
    ck_assert_int_eq(cudaMemset(lb, 0, nb), cudaSuccess);
    int64_t bad[1] = { 7001 };
    items[3] = (ckpt_read_item){ items[1].idx, NULL, bad, hh };
    ck_assert_int_eq(ckpt_load_batch(r, items + 1, 3, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "item 2 of 3") != NULL, "%s", err.msg);
    ck_assert_int_eq(cudaMemcpy(back, lb, nb, cudaMemcpyDeviceToHost), 0);
    for (size_t i = 0; i < nb; i++)
        ck_assert_int_eq(back[i], 0);
    cudaFree(lb);
    free(hreg);
    free(hh);
    ckpt_reader_close(r);
    cudaFree(dw);
    cudaFree(db);
    cudaFree(lw);
    free(rw);
    free(rb);
    free(rh);
    free(host);
    free(back);
    ck_assert_int_eq(ckpt_remove_tree(tmp, NULL), 0);
}

START_TEST(test_device_roundtrip)
{
    roundtrip(0);
}
END_TEST

START_TEST(test_device_small_cap)
{
    roundtrip((size_t)1 << 20);
}
END_TEST

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("SKIP: no usable CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    Suite *s = suite_create("async_cuda");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_device_roundtrip);
    tcase_add_test(tc, test_device_small_cap);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* CUDA is initialized here (cudaGetDeviceCount) and cannot be used
     * in a child forked after that: the tests run in this process. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
#endif
