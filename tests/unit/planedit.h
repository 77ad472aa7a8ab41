/*
 * planedit.h - test helpers that change a local plan (.pending/<w>.plan,
 * docs/FORMAT.md "Local plans") behind its writer's back: record by
 * record, each one re-framed with a valid checksum, so that the change
 * is what a reader sees (not a damaged record).
 */
#ifndef CKPT_TEST_PLANEDIT_H
#define CKPT_TEST_PLANEDIT_H

#include <stddef.h>
#include <stdint.h>

/* Sets the host and boot ("HOST BOOT_ID") the header names. */
void planedit_set_boot(const char *path, const char *boot);
/* Sets every APPEND record's layout claim; returns the records changed. */
int planedit_set_layout(const char *path, uint64_t pieces, uint64_t digest);
/* Cuts `n` bytes off the end of the packed records of every APPEND record
 * that has them; returns the records changed. */
int planedit_cut_packed(const char *path, size_t n);
/* Adds `more` raw bytes to the first frame of the first packed record of
 * every APPEND record (a record that no longer holds its piece's bytes);
 * returns the records changed. */
int planedit_grow_packed_raw(const char *path, uint64_t more);
/* The file offset where the plan's last record starts, and its size. */
size_t planedit_last_record(const char *path, size_t *size);

#endif
