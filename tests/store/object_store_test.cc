// The object store's own parts (lib/store/object_store.h) and the URL roots
// (lib/data/data_roots.h): URLs, credentials files, listing pages and error bodies as
// S3 writes them. The requests themselves are tested against a real S3-compatible
// server (tests/python/test_object_store.py).
#include "store/object_store.h"

#include <gtest/gtest.h>

#include "data/data_roots.h"

namespace ferry::store {
namespace {

TEST(ObjectUrlTest, SchemesBucketsAndKeys) {
  Result<ObjectUrl> u = ParseObjectUrl("s3://photos/train/class_00/");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(u->is_s3());
  EXPECT_EQ(u->bucket, "photos");
  EXPECT_EQ(u->key, "train/class_00/");
  EXPECT_EQ(u->ToString(), "s3://photos/train/class_00/");
  EXPECT_EQ(ParseObjectUrl("S3://photos")->key, "");
  Result<ObjectUrl> h = ParseObjectUrl("HTTPS://Host.Example:8443/shards/a.tar");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->scheme, ObjectUrl::Scheme::kHttps);
  EXPECT_EQ(h->bucket, "host.example:8443") << "the host, lower-cased";
  EXPECT_EQ(h->key, "shards/a.tar");
  EXPECT_TRUE(IsObjectUrl("http://x/y"));
  EXPECT_FALSE(IsObjectUrl("/data/s3://x"));
  EXPECT_FALSE(IsObjectUrl("file:///etc/passwd"));
  for (const char* bad : {"s3://", "s3:///key", "s3://ab/x", "s3://-bad-/x", "s3://has space/x", "ftp://h/x",
                          "https:///path", "s3://photos/a\nb"}) {
    EXPECT_FALSE(ParseObjectUrl(bad).ok()) << bad;
  }
  Result<ObjectUrl> creds = ParseObjectUrl("https://user:hunter2@host/x");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().message().find("hunter2"), std::string::npos) << "a password in a URL is never quoted";
}

TEST(ObjectUrlTest, KeysAreEncodedForPathsAndQueries) {
  EXPECT_EQ(EncodePath("a b/c+d/é~._-"), "a%20b/c%2Bd/%C3%A9~._-");
  EXPECT_EQ(EncodeQuery("train/x y"), "train%2Fx%20y");
}

TEST(CredentialsFileTest, ProfilesAsTheAwsToolsWriteThem) {
  const std::string text =
      "# comment\n[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key=secret0\n\n"
      "[team]\r\naws_access_key_id=AKIATEAM\r\naws_secret_access_key = secret1\r\naws_session_token = tok\r\n"
      "[profile other]\naws_access_key_id=AKIAOTHER\n";
  Result<Credentials> d = ParseCredentialsFile(text, "default");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->access_key, "AKIADEFAULT");
  EXPECT_EQ(d->secret_key, "secret0");
  EXPECT_EQ(d->session_token, "");
  Result<Credentials> t = ParseCredentialsFile(text, "team");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->secret_key, "secret1");
  EXPECT_EQ(t->session_token, "tok");
  EXPECT_EQ(ParseCredentialsFile(text, "other")->access_key, "AKIAOTHER");
  Result<Credentials> missing = ParseCredentialsFile(text, "nobody");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ListPageTest, KeysSizesAndContinuation) {
  const std::string page =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>photos</Name>"
      "<Prefix>tree/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
      "<Contents><Key>tree/a &amp; b.jpg</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
      "<ETag>&quot;x&quot;</ETag><Size>1234</Size><StorageClass>STANDARD</StorageClass></Contents>"
      "<Contents><Key>tree/c.jpg</Key><Size>0</Size></Contents>"
      "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
      "</ListBucketResult>";
  Result<ListPage> p = ParseListPage(page);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->objects.size(), 2u);
  EXPECT_EQ(p->objects[0].key, "tree/a & b.jpg");
  EXPECT_EQ(p->objects[0].size, 1234u);
  EXPECT_EQ(p->objects[1].size, 0u);
  EXPECT_TRUE(p->truncated);
  EXPECT_EQ(p->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");

  EXPECT_FALSE(ParseListPage("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>").ok())
      << "truncated with no token: the rest could not be listed";
  EXPECT_FALSE(ParseListPage("<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents>"
                             "</ListBucketResult>").ok());
  EXPECT_FALSE(ParseListPage("<ListBucketResult><Contents>").ok()) << "cut short";
  EXPECT_FALSE(ParseListPage("not xml").ok());
}

TEST(ListPageTest, ErrorBodiesGiveCodeAndMessageOnly) {
  const std::string body =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch</Code>"
      "<Message>The request signature we calculated does not match the signature you provided.</Message>"
      "<AWSAccessKeyId>AKIASECRETISH</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256 ...</StringToSign>"
      "<SignatureProvided>abcdef</SignatureProvided></Error>";
  const std::string e = ErrorOfBody(body);
  EXPECT_EQ(e, "SignatureDoesNotMatch: The request signature we calculated does not match the signature you "
               "provided.");
  EXPECT_EQ(e.find("AKIA"), std::string::npos);
  EXPECT_EQ(ErrorOfBody(""), "");
  EXPECT_EQ(ErrorOfBody("<html>503</html>"), "");
  Result<ListPage> p = ParseListPage(body);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message().find("AKIA"), std::string::npos);
}

TEST(UrlRootsTest, ADaemonReadsOnlyUnderItsUrlRoots) {
  Result<DataRoots> none = DataRoots::Make({});
  ASSERT_TRUE(none.ok());
  Status s = none->CheckUrl("s3://photos/tree/", "dataset");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("reads no URL"), std::string::npos) << s.ToString();

  Result<DataRoots> roots = DataRoots::Make({"s3://photos/tree/", "https://Files.Example/shards"});
  ASSERT_TRUE(roots.ok()) << roots.status().ToString();
  EXPECT_TRUE(roots->confined());
  EXPECT_TRUE(roots->CheckUrl("s3://photos/tree/", "dataset").ok());
  EXPECT_TRUE(roots->CheckUrl("s3://photos/tree/class_00/x.jpg", "dataset").ok());
  EXPECT_TRUE(roots->CheckUrl("https://files.example/shards/a-{000..009}.tar", "dataset").ok());
  for (const char* out : {"s3://photos/treehouse/", "s3://photos/", "s3://other/tree/", "http://files.example/shards/a",
                          "https://files.example/shardsx", "s3://photos/tree/../secret/", "s3://photos/tree/%2e%2e/x",
                          "https://files.example/shards/./../../etc"}) {
    Status o = roots->CheckUrl(out, "dataset");
    EXPECT_EQ(o.code(), StatusCode::kPermissionDenied) << out << ": " << o.ToString();
  }
  // Never, with or without roots: link-local and metadata services.
  Result<DataRoots> open = DataRoots::Make({"http://169.254.169.254/", "http://metadata.google.internal/"});
  ASSERT_TRUE(open.ok());
  for (const char* meta : {"http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/computeMetadata",
                           "http://[fd00:ec2::254]/latest", "http://[FE80::1]/x", "http://169.254.169.254.:80/x"}) {
    EXPECT_EQ(open->CheckUrl(meta, "dataset").code(), StatusCode::kPermissionDenied) << meta;
    EXPECT_EQ(DataRoots().CheckUrl(meta, "dataset").code(), StatusCode::kPermissionDenied) << meta;
  }
  EXPECT_TRUE(DataRoots().CheckUrl("s3://any/where/", "dataset").ok()) << "in-process: the trainer's own reads";
  // A daemon with only URL roots reads no file.
  EXPECT_EQ(roots->Check("/etc/passwd", "dataset").code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(DataRoots::Make({"s3://x/"}).ok()) << "not a bucket name";
}

}  // namespace
}  // namespace ferry::store
