//! The MIME multipart document nodeadm and cloud-init read from user data: parsing the
//! user's own document into its parts, and writing a `multipart/mixed` document.
//!
//! Parsing uses `mailparse` (small, maintained, handles header folding, quoted boundaries
//! and transfer encodings). Writing is by hand, in a few lines: the builders of the mail
//! crates (`mail-builder`, `lettre`) add `Date` and `Message-ID` headers and random
//! boundaries, and the launch template is named by a hash of its content, so the
//! document must be the same bytes for the same parts.

/// A MIME document that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum MimeError {
    /// The document is not valid MIME.
    #[error("user data is not valid MIME")]
    Parse(#[source] mailparse::MailParseError),
    /// The document is MIME but not multipart, or has no parts.
    #[error("user data is MIME but not a multipart document with parts (Content-Type {0})")]
    NotMultipart(String),
}

/// One part of a multipart document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// A part built here: its `Content-Type` and body.
    New {
        /// E.g. `application/node.eks.aws`.
        content_type: String,
        /// The body, as is.
        body: String,
    },
    /// A part taken from the user's document: its headers and body as they were written.
    Verbatim(Vec<u8>),
}

/// Whether `text` is a MIME document (it opens with a `MIME-Version` or `Content-Type`
/// header), as Karpenter decides it.
pub fn is_mime(text: &str) -> bool {
    let head = text.trim_start().to_ascii_lowercase();
    head.starts_with("mime-version:") || head.starts_with("content-type:")
}

/// The parts of a multipart document, each verbatim.
pub fn parts(text: &str) -> Result<Vec<Part>, MimeError> {
    let mail = mailparse::parse_mail(text.as_bytes()).map_err(MimeError::Parse)?;
    if !mail.ctype.mimetype.starts_with("multipart/") || mail.subparts.is_empty() {
        return Err(MimeError::NotMultipart(mail.ctype.mimetype.clone()));
    }
    Ok(mail
        .subparts
        .iter()
        .map(|p| {
            let raw = p.raw_bytes;
            let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            Part::Verbatim(raw.to_vec())
        })
        .collect())
}

fn fnv1a(parts: &[Part], salt: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64 ^ salt;
    for p in parts {
        let bytes: &[u8] = match p {
            Part::New { content_type, body } => {
                for b in content_type.bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
                }
                body.as_bytes()
            }
            Part::Verbatim(raw) => raw,
        };
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A boundary that no part contains: derived from the parts' bytes, so the same parts
/// give the same document.
fn boundary(parts: &[Part]) -> String {
    let mut salt = 0;
    loop {
        let candidate = format!("carpool-{:016x}", fnv1a(parts, salt));
        let clash = parts.iter().any(|p| match p {
            Part::New { body, .. } => body.contains(&candidate),
            Part::Verbatim(raw) => contains(raw, candidate.as_bytes()),
        });
        if !clash {
            return candidate;
        }
        salt += 1;
    }
}

/// A `multipart/mixed` document of `parts`, in order, with CRLF line breaks between
/// headers and boundaries (as Go's `mime/multipart` writes them).
pub fn document(parts: &[Part]) -> String {
    let boundary = boundary(parts);
    let mut out = format!("MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\r\n\r\n");
    for p in parts {
        out.push_str(&format!("--{boundary}\r\n"));
        match p {
            Part::New { content_type, body } => {
                out.push_str(&format!("Content-Type: {content_type}\r\n\r\n"));
                out.push_str(body);
            }
            Part::Verbatim(raw) => out.push_str(&String::from_utf8_lossy(raw)),
        }
        out.push_str("\r\n");
    }
    out.push_str(&format!("--{boundary}--\r\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(content_type: &str, body: &str) -> Part {
        Part::New {
            content_type: content_type.into(),
            body: body.into(),
        }
    }

    #[test]
    fn a_document_parses_back_into_its_parts() {
        let doc = document(&[
            new("text/x-shellscript", "#!/bin/bash\necho hi\n"),
            new("application/node.eks.aws", "kind: NodeConfig\n"),
        ]);
        assert!(is_mime(&doc));
        let mail = mailparse::parse_mail(doc.as_bytes()).unwrap();
        assert_eq!(mail.ctype.mimetype, "multipart/mixed");
        let got: Vec<(String, String)> = mail
            .subparts
            .iter()
            .map(|p| (p.ctype.mimetype.clone(), p.get_body().unwrap()))
            .collect();
        assert_eq!(got[0].0, "text/x-shellscript");
        assert!(got[0].1.starts_with("#!/bin/bash\necho hi"));
        assert_eq!(got[1].0, "application/node.eks.aws");
        assert_eq!(got[1].1.trim_end(), "kind: NodeConfig");
        assert_eq!(
            doc,
            document(&[
                new("text/x-shellscript", "#!/bin/bash\necho hi\n"),
                new("application/node.eks.aws", "kind: NodeConfig\n")
            ]),
            "deterministic"
        );
    }

    #[test]
    fn the_parts_of_a_users_document_are_kept_verbatim() {
        let user = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho one\n\n--BOUNDARY\nContent-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n\n--BOUNDARY--\n";
        let parts = parts(user).unwrap();
        assert_eq!(parts.len(), 2);
        let doc = document(&parts);
        let mail = mailparse::parse_mail(doc.as_bytes()).unwrap();
        assert_eq!(mail.subparts.len(), 2);
        assert_eq!(mail.subparts[0].ctype.mimetype, "text/x-shellscript");
        assert_eq!(mail.subparts[0].ctype.charset, "us-ascii");
        assert!(mail.subparts[0].get_body().unwrap().contains("echo one"));
        assert_eq!(mail.subparts[1].ctype.mimetype, "application/node.eks.aws");
    }

    #[test]
    fn a_boundary_inside_a_part_is_avoided_and_non_multipart_mime_is_refused() {
        // Whatever the parts hold (here another document's boundary), the chosen boundary
        // is in none of them, and the document parses back into them.
        let first = boundary(&[new("text/plain", "x")]);
        let tricky = vec![new("text/plain", "x"), new("text/plain", &first)];
        let chosen = boundary(&tricky);
        assert!(tricky.iter().all(|p| match p {
            Part::New { body, .. } => !body.contains(&chosen),
            Part::Verbatim(raw) => !contains(raw, chosen.as_bytes()),
        }));
        let doc = document(&tricky);
        let parsed = mailparse::parse_mail(doc.as_bytes()).unwrap();
        assert_eq!(parsed.subparts.len(), 2);
        assert_eq!(parsed.subparts[1].get_body().unwrap().trim_end(), first);
        assert!(matches!(
            parts("MIME-Version: 1.0\nContent-Type: text/plain\n\nhello\n"),
            Err(MimeError::NotMultipart(_))
        ));
        assert!(!is_mime("#!/bin/bash\n"));
    }
}
