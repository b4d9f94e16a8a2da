package io.delta.storage;

import java.io.IOException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;

/**
 * Compile-time stand-in for Delta's S3 log store: the two members ListFromS3SingleDriverLogStore
 * uses, with the signatures of delta-storage's class. Never packed into the jar (see
 * LocalLogStore.java beside it).
 */
public class S3SingleDriverLogStore {
  public S3SingleDriverLogStore(Configuration conf) {}

  public Iterator<FileStatus> listFrom(Path path, Configuration conf) throws IOException {
    throw new UnsupportedOperationException("compile-time stand-in");
  }
}
