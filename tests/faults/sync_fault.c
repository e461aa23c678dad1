/* A disk that fails, for real-process tests (LD_PRELOAD):
 * - while the file that FERRY_FAULT_SYNC_EIO names exists, fsync() and fdatasync()
 *   fail with EIO, as they do when a disk (or a thin-provisioned volume, or NFS)
 *   cannot write back the pages they cover;
 * - while the file that FERRY_FAULT_READ_EIO names exists, opening for reading a path
 *   that holds FERRY_FAULT_READ_MATCH fails with EIO, as on a failing disk or network
 *   filesystem (a fault that may pass: the file itself is fine).
 * The test creates and removes the files to start and end the faults.
 * Built without sanitizers: it is preloaded into sanitized programs too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int Failing(void) {
  const char* trigger = getenv("FERRY_FAULT_SYNC_EIO");
  struct stat st;
  return trigger != NULL && *trigger != '\0' && stat(trigger, &st) == 0;
}

int fdatasync(int fd) {
  static int (*real)(int) = NULL;
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  if (Failing()) {
    errno = EIO;
    return -1;
  }
  return real(fd);
}

int fsync(int fd) {
  static int (*real)(int) = NULL;
  if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  if (Failing()) {
    errno = EIO;
    return -1;
  }
  return real(fd);
}

static int ReadFails(const char* path, int flags) {
  const char* trigger = getenv("FERRY_FAULT_READ_EIO");
  const char* match = getenv("FERRY_FAULT_READ_MATCH");
  struct stat st;
  return (flags & O_ACCMODE) == O_RDONLY && trigger != NULL && *trigger != '\0' && match != NULL && *match != '\0' &&
         path != NULL && strstr(path, match) != NULL && stat(trigger, &st) == 0;
}

#define FAULT_OPEN(name)                                                       \
  int name(const char* path, int flags, ...) {                                 \
    static int (*real)(const char*, int, ...) = NULL;                          \
    if (real == NULL) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, #name); \
    mode_t mode = 0;                                                           \
    if (flags & (O_CREAT | O_TMPFILE)) {                                       \
      va_list ap;                                                              \
      va_start(ap, flags);                                                     \
      mode = (mode_t)va_arg(ap, int);                                          \
      va_end(ap);                                                              \
    }                                                                          \
    if (ReadFails(path, flags)) {                                              \
      errno = EIO;                                                             \
      return -1;                                                               \
    }                                                                          \
    return real(path, flags, mode);                                            \
  }
FAULT_OPEN(open)
FAULT_OPEN(open64)

#define FAULT_OPENAT(name)                                                     \
  int name(int dir, const char* path, int flags, ...) {                        \
    static int (*real)(int, const char*, int, ...) = NULL;                     \
    if (real == NULL) real = (int (*)(int, const char*, int, ...))dlsym(RTLD_NEXT, #name); \
    mode_t mode = 0;                                                           \
    if (flags & (O_CREAT | O_TMPFILE)) {                                       \
      va_list ap;                                                              \
      va_start(ap, flags);                                                     \
      mode = (mode_t)va_arg(ap, int);                                          \
      va_end(ap);                                                              \
    }                                                                          \
    if (ReadFails(path, flags)) {                                              \
      errno = EIO;                                                             \
      return -1;                                                               \
    }                                                                          \
    return real(dir, path, flags, mode);                                       \
  }
FAULT_OPENAT(openat)
FAULT_OPENAT(openat64)
