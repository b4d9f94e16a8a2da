package io.streamsql;

import io.delta.storage.LocalLogStore;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for the local file system, with a listing that does not grow with the log.
 *
 * <p>Delta asks a table's log for the files from a version on (`listFrom`) for nearly every
 * statement that names the table. Delta's own store lists the whole `_delta_log` folder through
 * Hadoop, which builds a status (a few system calls and objects) for every file of it: four a
 * version, kept for days. This one reads the folder's names only, keeps those from the version on
 * in order, and builds a status for each only when the caller reaches it (Delta mostly reads the
 * few since the last checkpoint). Files are written as Delta's local store writes them.
 */
public class ListFromLogStore extends LocalLogStore {
  public ListFromLogStore(Configuration conf) {
    super(conf);
  }

  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration conf) throws IOException {
    Path parent = path.getParent();
    FileSystem fs = parent.getFileSystem(conf);
    File dir = new File(fs.makeQualified(parent).toUri().getPath());
    String[] names = dir.list();
    if (names == null) {
      throw new FileNotFoundException("No such file or directory: " + parent);
    }
    String start = path.getName();
    List<String> kept = new ArrayList<>();
    for (String name : names) {
      if (name.startsWith(".") || name.compareTo(start) < 0) continue;
      kept.add(name);
    }
    Collections.sort(kept);
    Iterator<String> it = kept.iterator();
    return new Iterator<FileStatus>() {
      private FileStatus next = advance();

      private FileStatus advance() {
        while (it.hasNext()) {
          try {
            return fs.getFileStatus(new Path(parent, it.next()));
          } catch (FileNotFoundException gone) {
            // removed since the directory was read: as if listed before
          } catch (IOException e) {
            throw new UncheckedIOException(e);
          }
        }
        return null;
      }

      public boolean hasNext() {
        return next != null;
      }

      public FileStatus next() {
        if (next == null) throw new NoSuchElementException();
        FileStatus current = next;
        next = advance();
        return current;
      }
    };
  }
}
