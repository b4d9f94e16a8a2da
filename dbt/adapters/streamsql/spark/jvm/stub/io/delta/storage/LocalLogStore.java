package io.delta.storage;

import java.io.IOException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;

/**
 * Compile-time stand-in for Delta's local log store: the two members ListFromLogStore uses, with
 * the signatures of delta-storage's class. It lets the store compile before Delta's jars are
 * resolved (on a first start Ivy fetches them only once Spark runs). It is never packed into the
 * jar: at run time the class comes from Delta's own delta-storage jar.
 */
public class LocalLogStore {
  public LocalLogStore(Configuration conf) {}

  public Iterator<FileStatus> listFrom(Path path, Configuration conf) throws IOException {
    throw new UnsupportedOperationException("compile-time stand-in");
  }
}
