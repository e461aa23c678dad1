/* A disk that fails to sync, for real-process tests (LD_PRELOAD): while the file that
 * FERRY_FAULT_SYNC_EIO names exists, fsync() and fdatasync() fail with EIO, as they
 * do when a disk (or a thin-provisioned volume, or NFS) cannot write back the pages
 * they cover. The test creates and removes the file to start and end the fault.
 * Built without sanitizers: it is preloaded into sanitized programs too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
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
