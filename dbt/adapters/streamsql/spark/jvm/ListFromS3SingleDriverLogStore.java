package io.streamsql;

import io.delta.storage.S3SingleDriverLogStore;
import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for s3a:// tables, with a listing that starts at the version asked for.
 *
 * <p>Delta asks a table's log for the files from a version on (`listFrom`) for nearly every
 * statement that names the table. Delta's S3 store lists the whole `_delta_log/` prefix through
 * S3A, a LIST request per 1,000 keys, and drops the keys before the version: a log of 30 days of
 * commits is tens of pages, every time. This one asks S3 for the keys after the version's
 * (ListObjectsV2 `StartAfter`, through S3A's own client and credentials), so a listing costs what
 * the versions since it cost. S3 lists keys in order and is strongly consistent: a commit this
 * driver wrote is in the listing that follows it. Writes are Delta's store's, unchanged: one
 * driver's commits are safe, not two drivers' (the writer claim keeps to one).
 *
 * <p>S3A's client is reached by reflection (hadoop-aws and the AWS SDK are not on the classpath
 * this is compiled with). When that fails, when the file system is not S3A, or when nothing is
 * listed from the version on (a table not created yet: Delta's store says which), it asks Delta's
 * store, whose answer is the same, at its cost.
 */
public class ListFromS3SingleDriverLogStore extends S3SingleDriverLogStore {
  private static final String S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem";
  private static final String MODEL = "software.amazon.awssdk.services.s3.model.";

  public ListFromS3SingleDriverLogStore(Configuration conf) {
    super(conf);
  }

  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration conf) throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    if (!S3A.equals(fs.getClass().getName()) || path.getName().isEmpty()) {
      return super.listFrom(path, conf);
    }
    List<FileStatus> found;
    try {
      found = listAfter(fs, fs.makeQualified(path.getParent()), path.getName());
    } catch (ReflectiveOperationException | RuntimeException unavailable) {
      return super.listFrom(path, conf);
    }
    return found.isEmpty() ? super.listFrom(path, conf) : found.iterator();
  }

  /** The files of `dir` (not its folders) whose names are `start` or after it, in order. */
  private static List<FileStatus> listAfter(FileSystem fs, Path dir, String start)
      throws ReflectiveOperationException {
    ClassLoader loader = fs.getClass().getClassLoader();
    Class<?> internals = Class.forName("org.apache.hadoop.fs.s3a.S3AInternals", true, loader);
    Class<?> client = Class.forName("software.amazon.awssdk.services.s3.S3Client", true, loader);
    Class<?> request = Class.forName(MODEL + "ListObjectsV2Request", true, loader);
    Class<?> builder = Class.forName(MODEL + "ListObjectsV2Request$Builder", true, loader);
    Class<?> response = Class.forName(MODEL + "ListObjectsV2Response", true, loader);
    Class<?> object = Class.forName(MODEL + "S3Object", true, loader);
    Object s3 =
        internals
            .getMethod("getAmazonS3Client", String.class)
            .invoke(fs.getClass().getMethod("getS3AInternals").invoke(fs), "delta log listFrom");
    String bucket = (String) fs.getClass().getMethod("getBucket").invoke(fs);
    String prefix = fs.getClass().getMethod("pathToKey", Path.class).invoke(fs, dir) + "/";
    Method list = client.getMethod("listObjectsV2", request);
    Method set = builder.getMethod("bucket", String.class);
    long blockSize = fs.getDefaultBlockSize(dir);
    // Every key from `start` on sorts after `start` without its last character.
    String after = prefix + start.substring(0, start.length() - 1);
    List<FileStatus> found = new ArrayList<>();
    String token = null;
    do {
      Object asking = request.getMethod("builder").invoke(null);
      set.invoke(asking, bucket);
      builder.getMethod("prefix", String.class).invoke(asking, prefix);
      builder.getMethod("delimiter", String.class).invoke(asking, "/");
      if (token == null) {
        builder.getMethod("startAfter", String.class).invoke(asking, after);
      } else {
        builder.getMethod("continuationToken", String.class).invoke(asking, token);
      }
      Object page;
      try {
        page = list.invoke(s3, builder.getMethod("build").invoke(asking));
      } catch (InvocationTargetException failed) {
        throw new IllegalStateException(failed.getCause());
      }
      for (Object item : (List<?>) response.getMethod("contents").invoke(page)) {
        String name = ((String) object.getMethod("key").invoke(item)).substring(prefix.length());
        if (name.isEmpty() || name.contains("/") || name.compareTo(start) < 0) {
          continue;
        }
        long size = (Long) object.getMethod("size").invoke(item);
        long modified = ((Instant) object.getMethod("lastModified").invoke(item)).toEpochMilli();
        found.add(new FileStatus(size, false, 1, blockSize, modified, new Path(dir, name)));
      }
      boolean more = Boolean.TRUE.equals(response.getMethod("isTruncated").invoke(page));
      token = more ? (String) response.getMethod("nextContinuationToken").invoke(page) : null;
    } while (token != null);
    return found;
  }
}
