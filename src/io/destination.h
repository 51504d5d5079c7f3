/* Where an output really goes, checked before anything is written.
 *
 * A destination path is resolved the way open(2) would follow it: symlinks
 * are followed to their target (even a dangling one), so attn replaces the
 * target and keeps the link. The result must be a regular file or not exist
 * yet, in an existing directory; directories, FIFOs, devices and sockets are
 * refused (standard output is written only when asked for with "-"), and so
 * is a read-only file. Two paths naming the same file are recognised by
 * identity: (device, inode) of an existing file, (device, inode) of the
 * directory plus the name for one that does not exist yet.
 */
#ifndef ATTN_IO_DESTINATION_H
#define ATTN_IO_DESTINATION_H

#include "../core/internal.h"

#include <stdbool.h>
#include <sys/types.h>

typedef struct {
    const char *path;  /* as the caller gave it, borrowed */
    char shown[168];   /* how messages name it: the path, or "..." and its end if long */
    bool is_stdout;    /* "-" */
    char *target;      /* symlinks followed (malloc'd); NULL for stdout */
    size_t dir_len;    /* target[0, dir_len) is its directory with the trailing '/' */
    bool exists;
    dev_t dev, dir_dev;
    ino_t ino, dir_ino;
    mode_t mode;       /* of the existing file, kept by the replacement */
    uid_t uid;
    gid_t gid;
} attn_destination;

attn_status attn_destination_resolve(const char *path, attn_destination *d, attn_error *err);
/* Do a and b name the same file? */
bool attn_destination_same(const attn_destination *a, const attn_destination *b);
void attn_destination_free(attn_destination *d);

#endif
