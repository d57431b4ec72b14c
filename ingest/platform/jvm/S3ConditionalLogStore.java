package ingest.delta;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;

import io.delta.storage.S3SingleDriverLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for S3 with several writing drivers: a commit file is created with S3's
 * put-if-absent (`If-None-Match: *`, S3A's conditional create, Hadoop 3.4.2 and later), so of
 * two writers of one table version exactly one succeeds and the other gets
 * {@link java.nio.file.FileAlreadyExistsException}, which Delta's optimistic transaction
 * answers by checking for conflicts and retrying at the next version.
 *
 * <p>OSS Delta's {@link S3SingleDriverLogStore} checks for the file and then writes it: two
 * drivers can both pass the check, both writes succeed, and one commit is silently replaced.
 * Its lock only orders writers inside one JVM.
 *
 * <p>Everything else is that store's: listing, reading, overwrites (checkpoints,
 * `_last_checkpoint`), and the write itself where the file system offers no conditional create
 * (`fs.s3a.create.conditional.enabled=false`, or a store without it), which `ingest run` names
 * at start.
 */
public class S3ConditionalLogStore extends S3SingleDriverLogStore {

    public S3ConditionalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (overwrite || !ConditionalFiles.offered(fs, path)) {
            super.write(path, actions, overwrite, hadoopConf);
            return;
        }
        // Written as read, and kept: a commit file is small, and a failed close is settled by
        // comparing the bytes the store holds with these
        ByteArrayOutputStream written = new ByteArrayOutputStream();
        String landed;
        try {
            try (FSDataOutputStream out = ConditionalFiles.openIfAbsent(fs, path)) {
                while (actions.hasNext()) {
                    byte[] line = (actions.next() + "\n").getBytes(StandardCharsets.UTF_8);
                    out.write(line);
                    written.write(line);
                }
            }
            return;
        } catch (IOException failed) {
            landed = ConditionalFiles.settle(fs, path, written.toByteArray(), failed);
        }
        if (landed == null) {
            throw new java.nio.file.FileAlreadyExistsException(path.toString());
        }
    }
}
